// The data-path checks shared by the local and MPI suites: seeded random shards, planned and
// routed collectively; conservation of every real token at its zigzag position, padding marked,
// and the inverse route giving back every field bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dcpp/planner/planner.hpp"
#include "dcpp/route/router.hpp"

namespace dcpp_test::route {

//! (sample, position) of a real token, packed in 64 bits; padding carries -1.
struct token_tag {
  using value_type = std::int64_t;
  static constexpr std::string_view name = "token_tag";
  static constexpr value_type padding = -1;
};
//! A float field, to check that values travel bit for bit.
struct advantage {
  using value_type = float;
  static constexpr std::string_view name = "advantage";
  static constexpr value_type padding = 0.0f;
};

using shard_type = dcpp::token_shard<token_tag, dcpp::fields::token_ids, dcpp::fields::labels,
                                     dcpp::fields::loss_mask, advantage>;

inline std::int64_t tag(std::int64_t sample, std::int64_t position) {
  return (sample << 32) | position;
}

inline void expect(bool condition, const std::string& what) {
  if (!condition)
    throw std::runtime_error("data path: " + what);
}

//! The workload of `seed` for a world of `world` ranks: per-rank sample counts (some zero),
//! global lengths (a long tail that needs CP groups), and the options.
struct workload {
  dcpp::plan_options options;
  std::vector<std::int64_t> counts;
  std::vector<std::int64_t> lengths;
};

inline workload make_workload(std::uint64_t seed, int world) {
  std::mt19937_64 rng(seed * 7919 + static_cast<std::uint64_t>(world));
  workload w;
  w.options.world_size = world;
  w.options.max_tokens_per_rank = 24 + static_cast<std::int64_t>(rng() % 100);
  w.options.padding_unit = 1 + static_cast<std::int64_t>(rng() % 2);
  if (rng() % 4 == 0)
    w.options.group_topology = dcpp::topology::contiguous;
  const std::int64_t longest = dcpp::max_plannable_length(w.options);
  for (int r = 0; r < world; ++r) {
    const auto k = static_cast<std::int64_t>(rng() % 5);
    w.counts.push_back(k);
    for (std::int64_t i = 0; i < k; ++i) {
      const std::uint64_t kind = rng() % 10;
      std::int64_t length = kind < 6   ? 1 + static_cast<std::int64_t>(rng() % 20)
                            : kind < 9 ? 1 + static_cast<std::int64_t>(rng() % 90)
                                       : 1 + static_cast<std::int64_t>(rng() % longest);
      w.lengths.push_back(std::min(length, longest));
    }
  }
  if (w.lengths.empty()) { // the planner refuses an empty batch; give rank 0 one sample
    w.counts[0] = 1;
    w.lengths.push_back(1 + static_cast<std::int64_t>(rng() % 7));
  }
  return w;
}

inline shard_type make_shard(const workload& w, int rank, std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(rank + 1)));
  shard_type shard;
  std::int64_t first = 0;
  for (int r = 0; r < rank; ++r)
    first += w.counts[static_cast<std::size_t>(r)];
  for (std::int64_t i = 0; i < w.counts[static_cast<std::size_t>(rank)]; ++i) {
    const std::int64_t length = w.lengths[static_cast<std::size_t>(first + i)];
    shard.lengths.push_back(length);
    for (std::int64_t t = 0; t < length; ++t) {
      shard.get<token_tag>().push_back(tag(first + i, t));
      shard.get<dcpp::fields::token_ids>().push_back(static_cast<std::int32_t>(rng() % 50000) + 1);
      shard.get<dcpp::fields::labels>().push_back(static_cast<std::int32_t>(rng() % 50000));
      shard.get<dcpp::fields::loss_mask>().push_back(static_cast<std::uint8_t>(rng() % 2));
      shard.get<advantage>().push_back(std::uniform_real_distribution<float>(-3, 3)(rng));
    }
  }
  return shard;
}

//! Routes back field `F` of every micro-batch and checks it equals the shard bit for bit.
template <class Router, class F>
void check_inverse(Router& router, const std::vector<typename Router::batch_type>& batches,
                   const shard_type& shard) {
  using T = typename F::value_type;
  std::vector<T> back(shard.get<F>().size());
  if (!back.empty()) // poison
    std::memset(static_cast<void*>(back.data()), 0xA5, back.size() * sizeof(T));
  for (std::size_t m = 0; m < batches.size(); ++m)
    router.combine(m, std::span<const T>(batches[m].template get<F>()), std::span<T>(back));
  expect(back.size() == shard.get<F>().size() &&
             (back.empty() ||
              std::memcmp(back.data(), shard.get<F>().data(), back.size() * sizeof(T)) == 0),
         fmt::format("inverse route of field {} is not bit-identical", F::name));
}

//! The whole data path on `comm` for workload `seed`; every rank calls it.
template <dcpp::communicator C>
void run(C& comm, std::uint64_t seed, dcpp::placement where = dcpp::placement::locality_aware) {
  const workload w = make_workload(seed, comm.size());
  const shard_type shard = make_shard(w, comm.rank(), seed);
  dcpp::planner<dcpp::length_squared_cost> planner(w.options);
  auto router = dcpp::plan_step(planner, comm, shard, where);
  const dcpp::plan& p = router.get_plan();
  expect(p.lengths == w.lengths, "gathered lengths are the global lengths in rank order");
  expect(dcpp::validate(p, w.options).ok(), "placed plan is valid");

  // Conservation: each real token appears once over all ranks and micro-batches, where the
  // zigzag says; every other buffer slot is marked padding and carries the padding values.
  std::int64_t total = 0;
  std::vector<std::int64_t> first_token(w.lengths.size() + 1, 0);
  for (std::size_t s = 0; s < w.lengths.size(); ++s)
    first_token[s + 1] = first_token[s] + w.lengths[s];
  total = first_token.back();
  std::vector<std::int64_t> seen(static_cast<std::size_t>(total), 0);
  std::vector<typename decltype(router)::batch_type> batches;
  for (std::size_t m = 0; m < router.microbatches(); ++m) {
    auto b = router.dispatch(m, shard);
    const auto& l = b.layout;
    expect(static_cast<std::int64_t>(b.template get<token_tag>().size()) == l.tokens(),
           "buffer size");
    for (std::size_t i = 0; i + 1 < l.cu_seqlens.size(); ++i) {
      const std::int64_t s = l.samples[i];
      const std::int64_t length = l.cu_seqlens[i + 1] - l.cu_seqlens[i];
      const std::int64_t padded = l.cu_seqlens_padded[i + 1] - l.cu_seqlens_padded[i];
      expect(length == w.lengths[static_cast<std::size_t>(s)], "cu_seqlens real length");
      expect(padded % (2 * l.cp * w.options.padding_unit) == 0 && padded >= length &&
                 padded - length < 2 * l.cp * w.options.padding_unit,
             "padded to the next multiple of 2*cp*padding_unit");
      const std::int64_t base = l.cu_seqlens_padded[i] / l.cp, chunk = padded / (2 * l.cp);
      for (std::int64_t j = 0; j < padded / l.cp; ++j) {
        const auto at = static_cast<std::size_t>(base + j);
        const std::int64_t position =
            (j < chunk ? l.rank_in_group : 2 * l.cp - 1 - l.rank_in_group) * chunk + j % chunk;
        expect(b.position_ids[at] == position, "position ids restart per sample, zigzag order");
        if (position < length) {
          expect(b.is_real[at] == 1 && b.template get<token_tag>()[at] == tag(s, position),
                 fmt::format("token {} of sample {} at its zigzag place", position, s));
          ++seen[static_cast<std::size_t>(first_token[static_cast<std::size_t>(s)] + position)];
        } else {
          expect(b.is_real[at] == 0 && b.template get<token_tag>()[at] == -1 &&
                     b.template get<dcpp::fields::loss_mask>()[at] == 0 &&
                     b.template get<dcpp::fields::labels>()[at] == -100,
                 "padding is marked and carries the padding values");
        }
      }
    }
    if (!l.idle()) { // the group handle works: its size is cp and it reduces over the group
      auto g = router.group(m);
      std::int64_t one = 1;
      g.all_reduce(std::span<std::int64_t>(&one, 1), dcpp::reduce_op::sum);
      expect(g.size() == l.cp && one == l.cp && g.rank() == l.rank_in_group, "group handle");
    }
    batches.push_back(std::move(b));
  }
  comm.all_reduce(std::span<std::int64_t>(seen), dcpp::reduce_op::sum);
  for (std::size_t t = 0; t < seen.size(); ++t)
    expect(seen[t] == 1, fmt::format("global token {} seen {} times", t, seen[t]));

  check_inverse<decltype(router), token_tag>(router, batches, shard);
  check_inverse<decltype(router), dcpp::fields::token_ids>(router, batches, shard);
  check_inverse<decltype(router), dcpp::fields::labels>(router, batches, shard);
  check_inverse<decltype(router), dcpp::fields::loss_mask>(router, batches, shard);
  check_inverse<decltype(router), advantage>(router, batches, shard);
}

} // namespace dcpp_test::route
