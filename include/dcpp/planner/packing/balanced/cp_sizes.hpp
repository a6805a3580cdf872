// CP sizes for the balanced portfolio: each sample's ladder of sizes, the least-area choice the
// constructions start from, the round count that choice needs at least, and the raise toward
// a per-rank target that the targeted construction works with.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "dcpp/core/math.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/util/per_size.hpp"

namespace dcpp::detail {

//! CP sizes a sample may use: from `first` (its smallest), doubling while at most `last` (all
//! legal sizes in the aligned topology; a geometric ladder in the contiguous one), then `tail`
//! when it is larger (the megatron topology's group of all ranks, which need not be a power of
//! two). A range, so that walking it allocates nothing.
struct cp_ladder {
  static constexpr std::int64_t done = std::numeric_limits<std::int64_t>::max();
  struct iterator {
    std::int64_t cp;
    std::int64_t last;
    std::int64_t tail;
    std::int32_t operator*() const { return static_cast<std::int32_t>(cp); }
    iterator& operator++() {
      const std::int64_t next = cp * 2;
      cp = next <= last ? next : (tail > cp ? tail : done);
      return *this;
    }
    bool operator!=(const iterator& other) const { return cp != other.cp; }
  };
  std::int64_t first;
  std::int64_t last;
  std::int64_t tail = 0;
  [[nodiscard]] iterator begin() const {
    return {first <= last ? first : (tail >= first ? tail : done), last, tail};
  }
  [[nodiscard]] iterator end() const { return {done, last, tail}; }
};

//! The ladder of legal sizes from `from` (a legal size, or twice one) up to at most `to`: every
//! doubling in the aligned topology, a geometric ladder in the contiguous one, and in the
//! megatron topology the powers of two below the largest one <= world_size, then the group of
//! all ranks.
[[nodiscard]] inline cp_ladder ladder_between(const problem& pr, std::int64_t from,
                                              std::int64_t to) {
  const plan_options& o = pr.options;
  if (o.group_topology != topology::megatron)
    return {from, to};
  const auto world = static_cast<std::uint32_t>(o.world_size);
  const std::int64_t largest = std::bit_floor(world);
  const std::int64_t widest =
      std::min<std::int64_t>(to, std::bit_floor(static_cast<std::uint32_t>(o.effective_max_cp())));
  const std::int64_t last = std::min(widest, largest == o.world_size ? largest : largest / 2);
  const bool whole =
      largest != o.world_size && o.effective_max_cp() >= o.world_size && o.world_size <= to;
  return {from, last, whole ? std::int64_t{o.world_size} : 0};
}

//! Sample s's ladder: from its smallest legal size to the largest.
[[nodiscard]] inline cp_ladder ladder(const problem& pr, std::int32_t s) {
  return ladder_between(pr, pr.min_cp_of[static_cast<std::size_t>(s)],
                        pr.options.effective_max_cp());
}

//! The contiguous problem `pr` on its aligned sizes alone (powers of two at aligned first ranks,
//! each a legal contiguous group of the same cost), its costs tabulated, with `pr`'s micro-batch
//! overhead fixed as an option so that both price a round alike; empty where those sizes cannot
//! hold the batch (a smallest size that is not a power of two, a sample too long for them).
template <class Estimator>
[[nodiscard]] std::optional<problem> aligned_problem(const problem& pr,
                                                     const Estimator& estimator) {
  plan_options o = pr.options;
  const auto largest =
      static_cast<std::int32_t>(std::bit_floor(static_cast<std::uint32_t>(o.effective_max_cp())));
  if (!is_power_of_two(o.min_cp) || largest < o.min_cp)
    return std::nullopt;
  o.group_topology = topology::aligned;
  o.max_cp = largest;
  o.microbatch_overhead = microbatch_overhead(pr, estimator);
  if (!check_problem(o, pr.lengths))
    return std::nullopt;
  std::optional<problem> aligned = make_problem(o, pr.lengths);
  tabulate_costs(*aligned, estimator);
  return aligned;
}

//! A CP size per sample and the sample's cost there.
struct sample_sizes {
  std::vector<std::int32_t> cp;
  std::vector<double> cost;
};

//! Per sample, the size on its ladder with the least rank area `cost x cp` (a larger size only
//! for a real saving: `tuning.area_noise`). Worked out once per cost row.
template <class Estimator>
[[nodiscard]] sample_sizes least_area_sizes(const cost_rows<Estimator>& costs,
                                            const balanced_tuning& tuning) {
  const problem& pr = costs.batch();
  std::vector<std::pair<std::int32_t, double>> by_row(costs.rows());
  for (std::size_t r = 0; r < by_row.size(); ++r) {
    const std::int32_t first = costs.first_sample(r);
    const auto row = static_cast<std::int32_t>(r);
    std::pair<std::int32_t, double> pick{pr.min_cp_of[static_cast<std::size_t>(first)],
                                         std::numeric_limits<double>::infinity()};
    double best = std::numeric_limits<double>::infinity();
    const double* table = costs.row_table(r);
    for (const std::int32_t c : ladder(pr, first)) {
      const double w = costs.row_cost(row, table, costs.size_index(c), c);
      if (w * c < best * tuning.area_noise) {
        best = w * c;
        pick = {c, w};
      }
    }
    by_row[r] = pick;
  }
  sample_sizes out;
  out.cp.resize(pr.size());
  out.cost.resize(pr.size());
  for (std::int32_t s = 0; s < costs.samples(); ++s) {
    const auto us = static_cast<std::size_t>(s);
    std::tie(out.cp[us], out.cost[us]) = by_row[static_cast<std::size_t>(costs.row_of(s))];
  }
  return out;
}

//! One CP size for every sample, for the fixed-size constructions that balance best: among the
//! legal sizes from `smallest` (the least that holds every sample, static_cp's own), those within
//! rounding noise (`tuning.area_noise`) of the least total rank area `sum cost x cp` (under
//! length^2/cp every size ties): the largest whose padded tokens still fit in `rounds` rounds of
//! the world, and the largest of all (wider groups balance better, but pad every sample to a
//! multiple of 2 x cp x padding_unit, which may cost rounds), or the smallest when none fits; one
//! size when these agree, none when no size qualifies. Ascending. A size need not divide the world:
//! the tiled construction fills the rest with smaller groups. Only powers of two and divisors of
//! the world are candidates.
template <class Estimator>
[[nodiscard]] std::vector<std::int32_t>
least_total_area_sizes(const cost_rows<Estimator>& costs, std::int32_t smallest,
                       std::int32_t rounds, const balanced_tuning& tuning) {
  const problem& pr = costs.batch();
  const std::int32_t world = costs.world();
  std::vector<double> count(costs.rows(), 0.0);
  for (std::int32_t s = 0; s < costs.samples(); ++s)
    count[static_cast<std::size_t>(costs.row_of(s))] += 1;
  struct candidate {
    std::int32_t cp;
    double area;
    std::int64_t rank_tokens; // every sample's tokens per rank at cp
    std::size_t column;       // in the cost table
  };
  std::vector<candidate> sizes;
  double least = std::numeric_limits<double>::infinity();
  for (const std::int32_t c : pr.cp_sizes) {
    // in the contiguous topology every size is legal: only powers of two and divisors of the
    // world compete (the area of 1,024 sizes per length would cost more than the plan)
    if (c < smallest || (!is_power_of_two(c) && world % c != 0))
      continue;
    sizes.push_back({c, 0.0, 0, costs.size_index(c)});
  }
  // row by row, every candidate's sums (each in row order); a row's table entries read in place
  for (std::size_t r = 0; r < count.size(); ++r) {
    const auto row = static_cast<std::int32_t>(r);
    const double* table = costs.row_table(r);
    const std::int64_t length = pr.lengths[static_cast<std::size_t>(costs.first_sample(r))];
    for (candidate& k : sizes) {
      const double w = costs.row_cost(row, table, k.column, k.cp);
      k.area += count[r] * w * k.cp;
      k.rank_tokens +=
          static_cast<std::int64_t>(count[r]) * tokens_per_rank(pr.options, length, k.cp);
    }
  }
  for (const candidate& k : sizes)
    least = std::min(least, k.area);
  std::int32_t fits = 0;
  std::int32_t widest = 0;
  for (const candidate& k : sizes) {
    if (k.area * tuning.area_noise > least)
      continue;
    // the world's rank-tokens per round, in groups of cp: rank_tokens x cp against N x M
    const std::int64_t capacity = std::int64_t{world} * costs.budget() * rounds;
    if (fits == 0 || k.rank_tokens * k.cp <= capacity)
      fits = k.cp;
    widest = k.cp;
  }
  std::vector<std::int32_t> out;
  if (fits > 0)
    out.push_back(fits);
  if (widest != fits)
    out.push_back(widest);
  return out;
}

//! The fewest rounds that hold the samples at `sizes`: their rank tokens over the world's
//! budget, and the tokens of samples on more than half the world (two such groups never share
//! a round), rounded up to the micro-batch multiple.
template <class Estimator>
[[nodiscard]] std::int32_t token_lower_bound(const cost_rows<Estimator>& costs,
                                             const sample_sizes& sizes) {
  const std::int32_t world = costs.world();
  std::int64_t rank_tokens = 0;
  std::int64_t wide_tokens = 0;
  for (std::int32_t s = 0; s < costs.samples(); ++s) {
    const auto c = sizes.cp[static_cast<std::size_t>(s)];
    rank_tokens += costs.tokens(s, c) * c;
    if (2 * c > world)
      wide_tokens += costs.tokens(s, c);
  }
  const std::int64_t k =
      std::max({std::int64_t{1}, ceil_div(rank_tokens, std::int64_t{world} * costs.budget()),
                ceil_div(wide_tokens, costs.budget())});
  return round_up(static_cast<std::int32_t>(k), costs.options().microbatch_multiple);
}

//! Raises samples costlier than the per-rank target `area / (world x rounds)` to the smallest
//! larger size that brings them within it (or the cheapest on their ladder), a few passes (the
//! target falls as sizes rise). Returns the last target.
template <class Estimator>
double raise_toward_target(sample_sizes& sizes, const cost_rows<Estimator>& costs,
                           std::int32_t rounds, const balanced_tuning& tuning) {
  double target = 0;
  for (std::int32_t pass = 0; pass < tuning.raise_passes; ++pass) {
    double area = 0;
    for (std::int32_t s = 0; s < costs.samples(); ++s)
      area += sizes.cost[static_cast<std::size_t>(s)] * sizes.cp[static_cast<std::size_t>(s)];
    target = area / (static_cast<double>(costs.world()) * rounds);
    bool changed = false;
    for (std::int32_t s = 0; s < costs.samples(); ++s) {
      const auto us = static_cast<std::size_t>(s);
      if (sizes.cost[us] <= target)
        continue;
      std::int32_t pick = sizes.cp[us];
      double pick_cost = sizes.cost[us];
      for (const std::int32_t c : ladder(costs.batch(), s)) {
        if (c <= sizes.cp[us])
          continue;
        const double w = costs.cost(s, c);
        if (w < pick_cost) {
          pick = c;
          pick_cost = w;
        }
        if (w <= target)
          break;
      }
      if (pick != sizes.cp[us]) {
        sizes.cp[us] = pick;
        sizes.cost[us] = pick_cost;
        changed = true;
      }
    }
    if (!changed)
      break;
  }
  return target;
}

//! The rounds a plan may take: the token minimum `k_min` and `extra_microbatches` micro-batch
//! multiples more, or with -1 up to 1/`divisor` more (as many again at 1; at least one
//! multiple). Every plan pays the micro-batch overhead per round, so a construction that uses
//! more rounds wins only where they lower step time + overhead x micro-batches.
[[nodiscard]] inline std::size_t round_allowance(std::int32_t k_min,
                                                 std::int32_t extra_microbatches,
                                                 std::int32_t multiple, std::int32_t divisor) {
  std::int64_t extra = std::int64_t{extra_microbatches} * multiple;
  if (extra_microbatches < 0) {
    const std::int64_t share = ceil_div<std::int64_t>(k_min, divisor);
    extra = round_up<std::int64_t>(std::max<std::int64_t>(1, share), multiple);
  }
  return static_cast<std::size_t>(k_min + extra);
}

//! The sizes of the sized construction: `least_area` with the samples costlier than the
//! per-rank target of `rounds` rounds raised toward it (`raise_toward_target`); none where no
//! sample is raised (the levelled runs start from those sizes already).
template <class Estimator>
[[nodiscard]] std::optional<sample_sizes>
target_sizes(const sample_sizes& least_area, const cost_rows<Estimator>& costs, std::int32_t rounds,
             const balanced_tuning& tuning) {
  sample_sizes sizes = least_area;
  raise_toward_target(sizes, costs, rounds, tuning);
  if (sizes.cp == least_area.cp)
    return std::nullopt;
  return sizes;
}

} // namespace dcpp::detail
