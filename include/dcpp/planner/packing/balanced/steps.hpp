// The balanced portfolio as a list: its constructions, and the steps that run them in order,
// each with the batch size up to which it runs (the gate) and its construction's parameters.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "dcpp/planner/packing/balanced/levelled.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"

namespace dcpp {

//! The constructions of the `balanced` portfolio (docs/policies.md describes each).
enum class balanced_construction : std::uint8_t {
  megatron, //!< megatron_greedy's plan; also bounds the rounds of the others
  levelled, //!< balanced/levelled.hpp
  targeted, //!< balanced/targeted.hpp
  fixed_cp, //!< static_cp's plan: one CP size for every sample
  chunked,  //!< each class's gap-term rounds (bounds/gap.hpp), the other samples packed again
  bisected, //!< balanced/bisected.hpp: the samples that need CP first, the others packed again
  sized,    //!< levelled from the sizes a round-time target asks for (`raise_toward_target`)
  tied,     //!< levelled from the sizes of least area raised through ties (`tied_sizes`)
};

//! One step of the portfolio: a construction, the batch size (samples x ranks) up to which it
//! runs, and for a levelled one its reach.
struct balanced_step {
  balanced_construction construction = balanced_construction::levelled;
  std::int64_t up_to = std::numeric_limits<std::int64_t>::max();
  detail::levelled_reach reach{};
  //! For a fixed-CP step: the sizes of least total area (`detail::least_total_area_sizes`)
  //! instead of static_cp's smallest.
  bool least_area_size = false;
  //! The batch size above which it runs (with `up_to`: a range).
  std::int64_t above = -1;
  //! In the second list: after the first, and kept only where the passes after the steps do
  //! not do better from the first list's best plan (`balanced_run::run`).
  bool second = false;
  //! Only on dense batches (`balanced_tuning::dense`), raising up to `far_raise_area` there as
  //! the first levelled run does.
  bool dense = false;
  //! For a tied step: how many times a sample may be raised (0: as far as its ties go), and
  //! whether the sizes tie within `loose_tie_area` rather than `tie_area`.
  std::int32_t tie_raises = 0;
  bool loose_ties = false;
};

//! The steps after the megatron construction, in the order they run (an earlier plan wins a
//! tie; a plan at the lower bound ends them): one size for every sample at the sizes of least
//! total area (static_cp's plan, or the tiled one where the size does not divide the world);
//! levelled at the default reach with free rides (the one levelled run on large batches, with
//! `wide_raise_samples_per_rank`); on dense batches the same without rides (which win there on
//! some clusters after the search, never before it); the same without rides below the variants'
//! limit; its four variants; static; targeted;
//! bisected; chunked. Then the second list: the narrow and the wide-raise variants past the
//! variants' limit, the latter twice (up to `wide_raise_area` and `far_raise_area`: neither
//! wins on every batch), levelled from the sizes of least area raised through ties of area
//! (tied: once, then as far as the ties go, then both within a looser tie) and from the
//! target's sizes (sized), these with wide raises and free rides.
[[nodiscard]] inline std::vector<balanced_step> balanced_steps(const balanced_tuning& t) {
  using enum balanced_construction;
  const std::int64_t variants = t.levelled_variants_limit;
  return {
      {fixed_cp, std::numeric_limits<std::int64_t>::max(), {}, true},
      {levelled,
       std::numeric_limits<std::int64_t>::max(),
       {t.reach_area, 0.0, true, 0, t.free_ride}},
      {levelled,
       t.free_ride && t.dense_without_rides ? std::numeric_limits<std::int64_t>::max() : -1,
       {t.reach_area, 0.0},
       false,
       -1,
       false,
       true},
      {levelled, variants, {t.reach_area, 0.0}},
      {levelled, variants, {t.narrow_reach_area, 0.0}},
      {levelled, variants, {t.wide_reach_area, 0.0}},
      {levelled, t.heavy_share > 0 ? variants : -1, {t.narrow_reach_area, t.heavy_share}},
      {levelled, variants, {t.reach_area, 0.0, true, t.wide_raise_area}},
      {fixed_cp, t.static_limit, {}},
      {targeted, t.megatron_limit, {}},
      {bisected, t.bisected_limit, {}},
      {chunked, t.chunked_limit, {}},
      // the second list
      {levelled, t.narrow_variant_limit, {t.narrow_reach_area, 0.0}, false, variants, true},
      {levelled,
       t.wide_raise_variant_limit,
       {t.reach_area, 0.0, true, t.wide_raise_area},
       false,
       variants,
       true},
      {levelled,
       t.wide_raise_variant_limit,
       {t.reach_area, 0.0, true, t.far_raise_area},
       false,
       variants,
       true},
      {tied,
       t.tied_limit,
       {t.reach_area, 0.0, true, t.wide_raise_area, t.free_ride},
       false,
       -1,
       true,
       false,
       1},
      {tied,
       t.tied_limit,
       {t.reach_area, 0.0, true, t.wide_raise_area, t.free_ride},
       false,
       -1,
       true,
       false,
       0},
      {tied,
       t.tied_limit,
       {t.reach_area, 0.0, true, t.wide_raise_area, t.free_ride},
       false,
       -1,
       true,
       false,
       1,
       true},
      {tied,
       t.tied_limit,
       {t.reach_area, 0.0, true, t.wide_raise_area, t.free_ride},
       false,
       -1,
       true,
       false,
       0,
       true},
      {sized,
       t.sized_limit,
       {t.reach_area, 0.0, true, t.wide_raise_area, t.free_ride},
       false,
       -1,
       true},
  };
}

} // namespace dcpp
