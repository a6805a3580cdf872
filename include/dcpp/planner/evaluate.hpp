// A plan under an estimator: `evaluate` fills its group, micro-batch and step times and its
// metrics. The lower bounds it reports are in bounds/.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "dcpp/error.hpp"
#include "dcpp/planner/bounds/least_area.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

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
  const std::int32_t k_min = min_microbatches(pr);
  // (first: on a problem `tabulate_costs` never saw, this checks the costs)
  p.metrics.lower_bound = detail::lower_bound(pr, estimator, k_min);
  step += static_cast<double>(p.microbatches.size()) * overhead;
  // `tabulate_costs` keeps the overhead within what any plan of its problem can carry; a plan
  // evaluated on a problem it never saw, or with more micro-batches than samples, may not be
  if (!(step <= std::numeric_limits<double>::max())) [[unlikely]] {
    const detail::overhead_source source = detail::overhead_source_of(pr, estimator);
    throw error(source.code,
                fmt::format("{} = {}: the plan's {} micro-batches and their work cost {}, past "
                            "the largest double",
                            source.name, overhead, p.microbatches.size(), step));
  }
  p.metrics.estimated_step_time = step;
  p.metrics.efficiency = step > 0 ? p.metrics.lower_bound / step : 1.0;
  p.metrics.max_rank_load = load_max;
  const double slots = static_cast<double>(p.microbatches.size()) * p.world_size;
  p.metrics.mean_rank_load = slots > 0 ? load_sum / slots : 0.0;
  p.metrics.idle_rank_slots = idle;
  p.metrics.min_microbatches = k_min;
  p.metrics.microbatch_overhead = overhead;
}

} // namespace dcpp
