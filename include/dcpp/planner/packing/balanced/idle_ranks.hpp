// The last step of the balanced portfolio: the rounds that leave ranks idle give them to their
// critical group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/packing/microbatch_state.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp::detail {

//! `best` with each round that leaves ranks idle grown: its critical group takes them while that
//! makes the round faster (`microbatch_state::grow_critical_into_idle_ranks`); none where no
//! round got faster. Where no construction fills the world (more ranks than samples, past the
//! megatron limit) this keeps the plan from leaving most ranks idle; elsewhere the rounds have
//! no idle ranks and nothing changes.
template <class Estimator>
[[nodiscard]] std::optional<plan> grown_into_idle_ranks(const plan& best, const problem& pr,
                                                        const Estimator& estimator) {
  const std::int32_t world = pr.options.world_size;
  std::optional<plan> grown; // `best` with its grown rounds, copied at the first one
  for (std::size_t m = 0; m < best.microbatches.size(); ++m) {
    const plan_microbatch& mb = best.microbatches[m];
    std::int32_t busy = 0;
    for (const auto& g : mb.groups)
      busy += g.cp;
    if (busy >= world)
      continue;
    microbatch_state round(world);
    for (const auto& g : mb.groups) {
      const std::int32_t at = round.open(g.first_rank, g.cp);
      for (const std::int32_t sm : g.samples) {
        const auto us = static_cast<std::size_t>(sm);
        round.add(at, sm, pr.rank_tokens(us, g.cp), sample_cost(pr, estimator, us, g.cp));
      }
    }
    const double slowest = round.max_load();
    round.grow_critical_into_idle_ranks(pr, estimator);
    if (round.max_load() < slowest) {
      if (!grown)
        grown = best;
      grown->microbatches[m] = round.to_plan();
    }
  }
  return grown;
}

} // namespace dcpp::detail
