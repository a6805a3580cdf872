// The sized and tied constructions of the balanced portfolio: levelled rounds from the sizes a
// round-time target asks for, or from the sizes of least area raised through ties of area,
// instead of the sizes of least area.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/levelled.hpp"
#include "dcpp/planner/packing/balanced/steps.hpp"
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

//! `least_area` with each sample raised up its ladder to each larger size whose rank area is at
//! most `area` times the area at the size it has, `raises` times at most (0: no limit). Where
//! the ring's exchange hides behind compute the sizes tie in area, and the least-area choice
//! takes the smallest; a larger one halves the sample's time and tokens per rank for the same
//! area, and its groups hold more samples, which level better under the token budget (a
//! ProLong-like mix on groups of 2 rather than 1). A size that does not tie is passed over, not
//! the end of the climb: a fitted cost wobbles about the true one between its knots (a ring
//! just above zero at 4 ranks, at zero again at 8), and a preset's ties only end once the
//! exchange shows, at every larger size of the tier. None where no sample is raised, or (with
//! no limit) none more than once: that is the run with one raise.
template <class Estimator>
[[nodiscard]] std::optional<sample_sizes> tied_sizes(const sample_sizes& least_area,
                                                     const cost_rows<Estimator>& costs,
                                                     std::int32_t raises, double area) {
  const problem& pr = costs.batch();
  sample_sizes sizes = least_area;
  std::int32_t most = 0; // the most raises of any sample
  // the climb depends on the sample only through its row (length, so costs and ladder) and its
  // start: worked out once per row and start, kept for the row's next sample with that start
  struct climb {
    std::int32_t from_cp = 0; // 0: none yet
    double from_cost = 0;
    std::int32_t cp = 0;
    double cost = 0;
  };
  std::vector<climb> by_row(costs.rows());
  for (std::int32_t s = 0; s < costs.samples(); ++s) {
    const auto us = static_cast<std::size_t>(s);
    const std::int32_t row = costs.row_of(s);
    climb& known = by_row[static_cast<std::size_t>(row)];
    if (known.from_cp == sizes.cp[us] && known.from_cost == sizes.cost[us]) {
      sizes.cp[us] = known.cp;
      sizes.cost[us] = known.cost;
      continue;
    }
    known.from_cp = sizes.cp[us];
    known.from_cost = sizes.cost[us];
    std::int32_t raised = 0;
    const double* table = costs.row_table(static_cast<std::size_t>(row));
    for (const std::int32_t c : ladder(pr, s)) {
      if (c <= sizes.cp[us])
        continue;
      if (raises > 0 && raised == raises)
        break;
      const double w = costs.row_cost(row, table, costs.size_index(c), c);
      if (!(w * c <= area * sizes.cost[us] * sizes.cp[us]))
        continue;
      sizes.cp[us] = c;
      sizes.cost[us] = w;
      ++raised;
    }
    known.cp = sizes.cp[us];
    known.cost = sizes.cost[us];
    most = std::max(most, raised);
  }
  if (most == 0 || (raises == 0 && most == 1))
    return std::nullopt;
  return sizes;
}

//! Levelled from `tied_sizes` with step `st`'s raises within `tuning.tie_area` (loose ties:
//! `tuning.loose_tie_area`, none where those are the sizes of the exact ties; close ties:
//! `tuning.close_tie_area`, none where some size ties exactly or those are the loose ties' sizes)
//! with its reach, within `rounds_allowed`; none where the sizes are none.
template <class Estimator>
[[nodiscard]] std::optional<assignment<Estimator>>
tied(const cost_rows<Estimator>& costs, const sample_sizes& least_area, const balanced_step& st,
     std::int64_t rounds_allowed, const balanced_tuning& tuning) {
  // the close step stands in for the exact one where nothing ties exactly (the portfolio
  // does not run it otherwise: `balanced_run::ties_exactly`)
  if (st.close_ties && tied_sizes(least_area, costs, st.tie_raises, tuning.tie_area))
    return std::nullopt;
  const std::optional<sample_sizes> sizes =
      tied_sizes(least_area, costs, st.tie_raises,
                 st.loose_ties ? tuning.loose_tie_area
                               : (st.close_ties ? tuning.close_tie_area : tuning.tie_area));
  if (!sizes)
    return std::nullopt;
  if (st.loose_ties)
    if (const auto exact = tied_sizes(least_area, costs, st.tie_raises, tuning.tie_area);
        exact && exact->cp == sizes->cp)
      return std::nullopt;
  if (st.close_ties)
    if (const auto loose = tied_sizes(least_area, costs, st.tie_raises, tuning.loose_tie_area);
        loose && loose->cp == sizes->cp)
      return std::nullopt;
  levelled_start start = levelled_inputs(costs, *sizes);
  std::vector<levelled_slot> slots = std::move(start.slots);
  return levelled(costs, std::move(slots), start, rounds_allowed, st.reach, tuning);
}

//! Step `st`'s construction, sized (from `k_min` rounds, the fewest that pack) or tied, with its
//! reach, within `rounds_allowed`.
template <class Estimator>
[[nodiscard]] std::optional<assignment<Estimator>>
sized_step(const cost_rows<Estimator>& costs, const sample_sizes& least_area,
           const balanced_step& st, std::int32_t k_min, std::int64_t rounds_allowed,
           const balanced_tuning& tuning) {
  if (st.construction == balanced_construction::tied)
    return tied(costs, least_area, st, rounds_allowed, tuning);
  return sized(costs, least_area, k_min, rounds_allowed, st.reach, tuning);
}

} // namespace dcpp::detail
