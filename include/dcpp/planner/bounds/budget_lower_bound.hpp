// The lower bound that counts the token budget: `budget_lower_bound` assembles the terms of the
// other files of this folder (heavy samples, forced rounds, gaps, the slowest round; proofs in
// docs/bounds.md).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "dcpp/planner/bounds/forced_round.hpp"
#include "dcpp/planner/bounds/gap.hpp"
#include "dcpp/planner/bounds/least_area.hpp"
#include "dcpp/planner/bounds/slowest_round.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp {
namespace detail {

//! `budget_lower_bound`'s terms: every term but the gaps (with the overhead of the fewest rounds),
//! and the gap term (0 where it has nothing to say); the bound is the larger.
struct budget_terms {
  double without_gaps = 0;
  double gaps = 0;
};

template <workload_estimator Estimator>
budget_terms budget_bound_terms(const problem& pr, const Estimator& estimator) {
  const std::int32_t world = pr.options.world_size;
  const std::int32_t largest = pr.cp_sizes.empty() ? 1 : pr.cp_sizes.back();
  const auto is_heavy = [&](std::size_t i) {
    return 2 * std::int64_t{pr.min_cp_of[i]} > world &&
           2 * pr.rank_tokens(i, largest) > pr.options.max_tokens_per_rank;
  };
  const double n = world;
  const double budget = static_cast<double>(pr.options.max_tokens_per_rank);
  double heavy_time = 0;  // sum_h N * min_c w_h(c)
  double free_time = 0;   // sum_h max_c (N - c) w_h(c)
  double free_tokens = 0; // sum_h (N - min_cp_h) * M
  double light_area = 0;  // A_light
  double area = 0;        // every sample's least area, and the longest least time: lower_bound
  double longest = 0;
  std::size_t heavy = 0;
  std::vector<least_area_knapsack::item> light;
  std::vector<double> areas(pr.size()); // per sample: least area, least time, least rank-tokens
  std::vector<double> times(pr.size());
  std::vector<double> tokens(pr.size());
  // the values over the legal sizes, once per length (tabulate_costs's cost rows, or the same
  // grouping made here): on 65,536 samples of 7,075 lengths over 1,024 contiguous sizes, a tenth of
  // the work
  // (the rows are the gap term's too: each row's least area, and its own time, the time on the
  // size of least area, are kept there, `lengths.least`)
  struct over_sizes {
    double least_time = std::numeric_limits<double>::infinity();
    double most_free = 0;
    double least_tokens = std::numeric_limits<double>::infinity();
  };
  gap_rows lengths;
  start_gap_rows(pr, lengths);
  const std::span<const std::int32_t> row_of = lengths.row_of, first_of = lengths.first_of;
  std::vector<over_sizes> rows(first_of.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto first = static_cast<std::size_t>(first_of[r]);
    over_sizes& v = rows[r];
    length_least& own = lengths.least[r];
    for (const std::int32_t cp : pr.cp_sizes) {
      if (cp < pr.min_cp_of[first])
        continue;
      const double w = sample_cost(pr, estimator, first, cp);
      own.take(w, cp);
      v.least_time = std::min(v.least_time, w);
      v.most_free = std::max(v.most_free, (n - cp) * w);
      v.least_tokens =
          std::min(v.least_tokens, static_cast<double>(pr.rank_tokens(first, cp)) * cp);
    }
  }
  finish_gap_rows(pr, lengths);
  for (std::size_t i = 0; i < pr.size(); ++i) {
    const auto r = static_cast<std::size_t>(row_of[i]);
    const double least_area = lengths.least[r].area;
    const auto& [least_time, most_free, least_tokens] = rows[r];
    area += least_area;
    longest = std::max(longest, least_time);
    areas[i] = least_area;
    times[i] = least_time;
    tokens[i] = least_tokens;
    if (is_heavy(i)) {
      ++heavy;
      heavy_time += n * least_time;
      free_time += most_free;
      free_tokens += (n - pr.min_cp_of[i]) * budget;
    } else {
      light_area += least_area;
      light.push_back(least_area_knapsack::item_of(least_area, least_tokens, i));
    }
  }
  const double carried = // KS(free_tokens)
      heavy > 0 ? least_area_knapsack(std::move(light)).carried(free_tokens) : 0.0;
  const double overhead = microbatch_overhead(pr, estimator);
  const std::int32_t k_min = min_microbatches(pr);
  // without heavy samples every term is lower_bound's (the same sums in the same order)
  const double work_bound =
      heavy == 0 ? 0.0 : (heavy_time + light_area - std::min(carried, free_time)) / n;
  // the counts share one budget of search steps, which keeps the term within the time of the
  // other terms (docs/bounds.md section 3)
  double forced = 0;
  std::int64_t steps_left = std::int64_t{1} << 19;
  if (!pr.lengths.empty() && pr.cp_sizes.size() <= forced_round_most_sizes) {
    const forced_round_inputs inputs =
        forced_round_setup(pr, estimator, areas, times, tokens, row_of, first_of,
                           std::ranges::max(forced_round_counts));
    for (const std::size_t most_big : forced_round_counts) {
      forced = std::max(forced, forced_round_bound(pr, estimator, inputs, areas, tokens, area,
                                                   most_big, steps_left));
      if (most_big >= pr.size())
        break; // every sample is big: more deal the same
    }
  }
  const auto fewest =
      static_cast<std::int64_t>(std::max<std::size_t>(static_cast<std::size_t>(k_min), heavy));
  double gaps = 0; // the gap term of each class of samples (same smallest size, at least 2)
  for (const gap_class& c : gap_classes(pr, estimator, lengths, fewest, overhead))
    gaps = std::max(gaps, c.bound);
  const double slowest = pr.cp_sizes.size() <= gap_bound_most_sizes
                             ? slowest_round_bound(pr, estimator, lengths, lengths.total)
                             : 0.0;
  return {std::max({area / n, longest, work_bound, forced, slowest}) +
              static_cast<double>(fewest) * overhead,
          gaps};
}
} // namespace detail

//! A lower bound on the step time that also counts the token budget (`lower_bound` ignores it),
//! for judging how much of a gap any plan could close; always >= `lower_bound`. The larger of
//! `budget_bound_terms`' two values: heavy samples (docs/bounds.md section 2), forced rounds
//! (section 3) and the slowest round (sections 5 and 6) with the overhead of the fewest rounds,
//! and the gaps (section 4) with the overhead of their own rounds.
template <workload_estimator Estimator>
double budget_lower_bound(const problem& pr, const Estimator& estimator) {
  const detail::budget_terms terms = detail::budget_bound_terms(pr, estimator);
  return std::max(terms.without_gaps, terms.gaps);
}

} // namespace dcpp
