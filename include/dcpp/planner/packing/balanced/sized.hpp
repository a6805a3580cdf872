// The sized construction of the balanced portfolio: levelled rounds from the sizes a round-time
// target asks for, instead of the sizes of least area.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/levelled.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"

namespace dcpp::detail {

//! Levelled from the step-time side: each sample on the size that brings it within the
//! per-rank target of `rounds` rounds (`target_sizes`), larger than its size of least area
//! where the round's time asks for it (a 96K sample on 16 ranks spanning two nodes costs more
//! area than on 8, but halves its time and that of the round it sets), then the levelled
//! construction from those sizes with `reach`, within `rounds_allowed`. None where the target
//! raises no sample (the levelled runs start from those sizes), or with fewer samples than
//! ranks: there the idle-ranks pass sizes the groups from the levelled rounds, and rounds from
//! raised sizes left it less to grow (512 samples on 2,048 contiguous ranks: 0.77 of the bound
//! against 0.95).
template <class Estimator>
[[nodiscard]] std::optional<assignment<Estimator>>
sized(const cost_rows<Estimator>& costs, const sample_sizes& least_area, std::int32_t rounds,
      std::int64_t rounds_allowed, const levelled_reach& reach, const balanced_tuning& tuning) {
  if (costs.samples() < costs.world())
    return std::nullopt;
  const std::optional<sample_sizes> sizes = target_sizes(least_area, costs, rounds, tuning);
  if (!sizes)
    return std::nullopt;
  levelled_start start = levelled_inputs(costs, *sizes);
  std::vector<levelled_slot> slots = std::move(start.slots);
  return levelled(costs, std::move(slots), start, rounds_allowed, reach, tuning);
}

} // namespace dcpp::detail
