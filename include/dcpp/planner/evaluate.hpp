// A plan under an estimator: `evaluate` (group, micro-batch and step times, the metrics), the
// fewest micro-batches any plan needs, and the two lower bounds on the step time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "dcpp/core/math.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

//! Fewest micro-batches any plan needs: total padded tokens (each sample at its smallest cp)
//! over the world's token capacity, rounded up to the micro-batch multiple.
inline std::int32_t min_microbatches(const problem& pr) {
  return detail::fewest_microbatches(pr);
}

namespace detail {
//! `lower_bound` with the fewest micro-batches `k_min` (= min_microbatches(pr)) given.
template <workload_estimator Estimator>
double lower_bound(const problem& pr, const Estimator& estimator, std::int32_t k_min) {
  return least_work_of(pr, estimator).bound() + k_min * microbatch_overhead(pr, estimator);
}
} // namespace detail

//! `LB = max( sum_i min_c c*cost(L_i,c) / N , max_i min_c cost(L_i,c) )` over the feasible c,
//! plus the micro-batch overhead (`microbatch_overhead(pr, estimator)`) for the fewest
//! micro-batches any plan needs.
template <workload_estimator Estimator>
double lower_bound(const problem& pr, const Estimator& estimator) {
  return detail::lower_bound(pr, estimator, min_microbatches(pr));
}

//! A lower bound that also counts the token budget (DESIGN.md's `lower_bound` ignores it), for
//! judging how much of a gap any plan could close; always >= `lower_bound`.
//! Heavy samples (smallest legal CP size above half the world, and more than half the budget
//! per rank even on the largest legal group) cannot share a round: not in two groups (too many
//! ranks) nor in one (too many tokens). So each holds a round of time >= its cost `w_h` on all
//! N ranks. The other N - c_h ranks of that round can only be filled by light samples whose
//! rank-tokens fit their (N - c_h) * M budget, and a light sample there takes at most its least
//! rank area out of the other rounds. So, with
//! `A_light` the least areas of the light samples and `KS(C)` the most least-area that light
//! samples of at most C rank-tokens carry (fractional knapsack, least rank-tokens per sample):
//!   N * sum_k T_k >= sum_h N w_h + A_light - min(KS(sum_h (N - c_h) M), sum_h (N - c_h) w_h)
//! (each heavy sample at its cheapest size for the first sum and its smallest for the rest: a
//! valid relaxation of the choice of sizes), and every plan has at least max(token minimum,
//! heavy samples) rounds of overhead. Without heavy samples it equals `lower_bound`.
template <workload_estimator Estimator>
double budget_lower_bound(const problem& pr, const Estimator& estimator) {
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
  struct item {
    double density; // least area per least rank-tokens
    double tokens;
    std::size_t id;
  };
  std::vector<item> light;
  for (std::size_t i = 0; i < pr.size(); ++i) {
    double least_area = std::numeric_limits<double>::infinity();
    double least_time = std::numeric_limits<double>::infinity();
    double most_free = 0;
    double least_tokens = std::numeric_limits<double>::infinity();
    for (const std::int32_t cp : pr.cp_sizes) {
      if (cp < pr.min_cp_of[i])
        continue;
      const double w = sample_cost(pr, estimator, i, cp);
      least_area = std::min(least_area, w * cp);
      least_time = std::min(least_time, w);
      most_free = std::max(most_free, (n - cp) * w);
      least_tokens = std::min(least_tokens, static_cast<double>(pr.rank_tokens(i, cp)) * cp);
    }
    area += least_area;
    longest = std::max(longest, least_time);
    if (is_heavy(i)) {
      ++heavy;
      heavy_time += n * least_time;
      free_time += most_free;
      free_tokens += (n - pr.min_cp_of[i]) * budget;
    } else {
      light_area += least_area;
      light.push_back({least_area / least_tokens, least_tokens, i});
    }
  }
  double carried = 0; // KS(free_tokens)
  if (heavy > 0) {
    std::sort(light.begin(), light.end(), [](const item& a, const item& b) {
      return a.density != b.density ? a.density > b.density : a.id < b.id;
    });
    double capacity = free_tokens;
    for (const item& it : light) {
      if (capacity <= 0)
        break;
      const double take = std::min(it.tokens, capacity);
      carried += it.density * take;
      capacity -= take;
    }
  }
  const double overhead = microbatch_overhead(pr, estimator);
  const std::int32_t k_min = min_microbatches(pr);
  // without heavy samples every term is lower_bound's (the same sums in the same order)
  const double work_bound =
      heavy == 0 ? 0.0 : (heavy_time + light_area - std::min(carried, free_time)) / n;
  return std::max({area / n, longest, work_bound}) +
         static_cast<double>(std::max<std::size_t>(static_cast<std::size_t>(k_min), heavy)) *
             overhead;
}

//! Fills every group's tokens and time, every micro-batch's time and idle ranks, and the metrics
//! (all but plan_seconds) under `estimator`.
template <workload_estimator Estimator>
void evaluate(plan& p, const problem& pr, const Estimator& estimator) {
  double step = 0;
  double load_sum = 0;
  double load_max = 0;
  std::int64_t idle = 0;
  for (auto& mb : p.microbatches) {
    mb.time = 0;
    std::int32_t covered = 0;
    for (auto& g : mb.groups) {
      g.tokens = 0;
      g.time = 0;
      const std::int32_t column = detail::cost_column(pr, g.cp); // once for its samples
      for (const std::int32_t s : g.samples) {
        const auto us = static_cast<std::size_t>(s);
        g.tokens += pr.rank_tokens(us, g.cp);
        g.time += detail::sample_cost_in(pr, estimator, us, g.cp, column);
      }
      mb.time = std::max(mb.time, g.time);
      load_sum += g.time * g.cp;
      covered += g.cp;
    }
    mb.idle_ranks = p.world_size - covered;
    idle += mb.idle_ranks;
    step += mb.time;
    load_max = std::max(load_max, mb.time);
  }
  const double overhead = microbatch_overhead(pr, estimator);
  step += static_cast<double>(p.microbatches.size()) * overhead;
  p.metrics.estimated_step_time = step;
  const std::int32_t k_min = min_microbatches(pr);
  p.metrics.lower_bound = detail::lower_bound(pr, estimator, k_min);
  p.metrics.efficiency = step > 0 ? p.metrics.lower_bound / step : 1.0;
  p.metrics.max_rank_load = load_max;
  const double slots = static_cast<double>(p.microbatches.size()) * p.world_size;
  p.metrics.mean_rank_load = slots > 0 ? load_sum / slots : 0.0;
  p.metrics.idle_rank_slots = idle;
  p.metrics.min_microbatches = k_min;
  p.metrics.microbatch_overhead = overhead;
}

} // namespace dcpp
