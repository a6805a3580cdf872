// The head-parallel exchange's seeded check, shared by the local and MPI suites: the world cut
// into CP groups of random sizes, each group's sequences a random tensor every member builds the
// same way; cp2hp against the whole tensor's heads, hp2cp back to the zigzag buffer, and a causal
// cumulative sum per head (a stand-in for a recurrence) through cp2hp, the sum and hp2cp against
// the same sum on the whole tensor, all bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dcpp/core/zigzag.hpp"
#include "dcpp/route/head_parallel.hpp"
#include "dcpp/workload/generators.hpp"

namespace dcpp_test::head_parallel {

//! One group's sequences: the layout of group rank `rank_in_group`, the head shape and the whole
//! tensor `[padded tokens of every sample in order][heads][head_dim]`.
struct group_case {
  dcpp::thd_layout layout;
  dcpp::head_shape shape;
  std::vector<double> whole;
};

//! The groups of a world of `world` ranks for `seed`: sizes (any, so the contiguous kind), in
//! rank order.
inline std::vector<std::int32_t> group_sizes(std::uint64_t seed, std::int32_t world) {
  dcpp::workload::rng r(seed);
  std::vector<std::int32_t> sizes;
  for (std::int32_t left = world; left > 0;) {
    const auto cp = static_cast<std::int32_t>(r.uniform_int(1, left));
    sizes.push_back(cp);
    left -= cp;
  }
  return sizes;
}

//! The case of the group `[first, first + cp)` for `seed`, as group rank `me` sees it: heads a
//! multiple of cp (1-3 per rank) or, one time in three when cp allows, a divisor of cp below it
//! (key/value heads held by several ranks); 0-4 samples of 1-40 tokens, padded to a multiple of
//! 2cp and sometimes 2cp more.
inline group_case make_group(std::uint64_t seed, std::int32_t first, std::int32_t cp,
                             std::int32_t me) {
  dcpp::workload::rng r(seed * 1000003 + static_cast<std::uint64_t>(first));
  group_case g;
  g.shape.head_dim = r.uniform_int(1, 5);
  g.shape.heads = static_cast<std::int32_t>(cp * r.uniform_int(1, 3));
  if (cp > 1 && r.uniform_int(0, 2) == 0) {
    std::vector<std::int32_t> divisors;
    for (std::int32_t d = 1; d < cp; ++d)
      if (cp % d == 0)
        divisors.push_back(d);
    g.shape.heads = divisors[static_cast<std::size_t>(
        r.uniform_int(0, static_cast<std::int64_t>(divisors.size()) - 1))];
  }
  g.layout.first_rank = first;
  g.layout.cp = cp;
  g.layout.rank_in_group = me;
  const auto samples = r.uniform_int(0, 4);
  for (std::int64_t i = 0; i < samples; ++i) {
    const std::int64_t length = r.uniform_int(1, 40);
    std::int64_t padded = (length + 2 * cp - 1) / (2 * cp) * (2 * cp);
    if (r.uniform_int(0, 3) == 0)
      padded += 2 * cp;
    g.layout.samples.push_back(static_cast<std::int32_t>(first * 10 + i));
    g.layout.cu_seqlens.push_back(g.layout.cu_seqlens.back() + static_cast<std::int32_t>(length));
    g.layout.cu_seqlens_padded.push_back(g.layout.cu_seqlens_padded.back() +
                                         static_cast<std::int32_t>(padded));
  }
  g.whole.resize(static_cast<std::size_t>(std::int64_t{g.layout.cu_seqlens_padded.back()} *
                                          g.shape.heads * g.shape.head_dim));
  for (double& v : g.whole)
    v = r.uniform() * 2 - 1;
  return g;
}

//! Group rank `me`'s zigzag buffer of `whole` (written independently of the library's helper:
//! chunk by chunk from zigzag_position).
inline std::vector<double> zigzag_slice(const group_case& g, const std::vector<double>& whole) {
  const dcpp::thd_layout& l = g.layout;
  const std::int64_t row = std::int64_t{g.shape.heads} * g.shape.head_dim;
  std::vector<double> out;
  for (std::size_t i = 0; i < l.samples.size(); ++i) {
    const std::int64_t padded = l.cu_seqlens_padded[i + 1] - l.cu_seqlens_padded[i];
    for (std::int64_t j = 0; j < padded / l.cp; ++j) {
      const std::int64_t p =
          l.cu_seqlens_padded[i] + dcpp::zigzag_position(padded, l.cp, l.rank_in_group, j);
      out.insert(out.end(), whole.begin() + p * row, whole.begin() + (p + 1) * row);
    }
  }
  return out;
}

//! The heads group rank `me` holds, of every token of `whole`.
inline std::vector<double> head_slice(const group_case& g, const std::vector<double>& whole) {
  const dcpp::head_split split{g.shape.heads, g.layout.cp};
  const std::int64_t row = std::int64_t{g.shape.heads} * g.shape.head_dim;
  const std::int64_t first = split.first(g.layout.rank_in_group) * g.shape.head_dim;
  const std::int64_t part = std::int64_t{split.count()} * g.shape.head_dim;
  std::vector<double> out;
  for (std::int64_t t = 0; t < g.layout.cu_seqlens_padded.back(); ++t)
    out.insert(out.end(), whole.begin() + t * row + first, whole.begin() + t * row + first + part);
  return out;
}

//! This rank's head-parallel values times (1 + its group rank).
inline std::vector<double> holder_weighted(const dcpp::thd_layout& l, std::vector<double> hp) {
  for (double& v : hp)
    v *= 1 + l.rank_in_group;
  return hp;
}
//! What hp2cp with replica_merge::sum gives from `holder_weighted` buffers: for each element of
//! the zigzag buffer `local`, its head's holders q in group-rank order, local x (1 + q), the
//! first holder's term taken and the others added.
inline std::vector<double> holder_weighted_sum(const group_case& g,
                                               const std::vector<double>& local) {
  const dcpp::head_split split{g.shape.heads, g.layout.cp};
  std::vector<double> expected(local.size());
  for (std::size_t e = 0; e < local.size(); ++e) {
    const auto head = static_cast<std::int32_t>((static_cast<std::int64_t>(e) / g.shape.head_dim) %
                                                g.shape.heads);
    std::int32_t first = -1, count = 1;
    for (std::int32_t q = 0; q < g.layout.cp; ++q)
      if (split.first(q) <= head && head < split.first(q) + split.count()) {
        if (first < 0)
          first = q;
        else
          ++count;
      }
    expected[e] = local[e] * (1 + first);
    for (std::int32_t q = first + 1; q < first + count; ++q)
      expected[e] += local[e] * (1 + q);
  }
  return expected;
}

//! A causal cumulative sum along each sample, per head and element, on rows of `width` heads.
inline void cumulative_sum(std::vector<double>& rows, const dcpp::thd_layout& l, std::int64_t width,
                           std::int64_t head_dim) {
  const std::int64_t row = width * head_dim;
  for (std::size_t i = 0; i < l.samples.size(); ++i)
    for (std::int64_t t = l.cu_seqlens_padded[i] + 1; t < l.cu_seqlens_padded[i + 1]; ++t)
      for (std::int64_t e = 0; e < row; ++e)
        rows[static_cast<std::size_t>(t * row + e)] +=
            rows[static_cast<std::size_t>((t - 1) * row + e)];
}

//! The group case of `rank` in a world of `world` ranks cut by `group_sizes(seed, world)`.
inline group_case rank_group(std::uint64_t seed, std::int32_t world, std::int32_t rank) {
  std::int32_t first = 0;
  std::int32_t cp = 0;
  for (const std::int32_t size : group_sizes(seed, world)) {
    if (rank < first + size) {
      cp = size;
      break;
    }
    first += size;
  }
  return make_group(seed, first, cp, rank - first);
}

//! Runs the whole check on `comm` for `seed` (every rank calls it).
template <class C>
void run(C& comm, std::uint64_t seed) {
  const group_case g = rank_group(seed, comm.size(), comm.rank());
  const std::int32_t cp = g.layout.cp;
  const dcpp::head_split split{g.shape.heads, cp};
  const std::vector<double> local = zigzag_slice(g, g.whole);
  CHECK(static_cast<std::int64_t>(local.size()) == dcpp::cp_elements(g.layout, g.shape));

  // cp2hp gives this rank's heads of every whole sequence
  std::vector<double> hp(static_cast<std::size_t>(dcpp::hp_elements(g.layout, g.shape)));
  dcpp::cp2hp(comm, g.layout, g.shape, std::span<const double>(local), std::span<double>(hp));
  CHECK(hp == head_slice(g, g.whole));

  // hp2cp takes it back (the lowest holder's copy of a shared head)
  std::vector<double> back(local.size(), -7.0);
  dcpp::hp2cp(comm, g.layout, g.shape, std::span<const double>(hp), std::span<double>(back));
  CHECK(back == local);

  // a whole-sequence operation per head through the exchange equals it on one rank
  std::vector<double> summed = hp;
  cumulative_sum(summed, g.layout, split.count(), g.shape.head_dim);
  std::vector<double> result(local.size());
  dcpp::hp2cp(comm, g.layout, g.shape, std::span<const double>(summed), std::span<double>(result));
  std::vector<double> whole_summed = g.whole;
  cumulative_sum(whole_summed, g.layout, g.shape.heads, g.shape.head_dim);
  CHECK(result == zigzag_slice(g, whole_summed));

  // gradients of a shared head add up over its holders, in group-rank order: each holder sends
  // its values times (1 + its group rank), so a lost, doubled or reordered holder shows
  const std::vector<double> weighted = holder_weighted(g.layout, hp);
  std::vector<double> added(local.size(), -7.0);
  dcpp::hp2cp(comm, g.layout, g.shape, std::span<const double>(weighted), std::span<double>(added),
              dcpp::replica_merge::sum);
  CHECK(added == holder_weighted_sum(g, local));
}

} // namespace dcpp_test::head_parallel
