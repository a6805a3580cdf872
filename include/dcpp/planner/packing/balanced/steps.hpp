// The balanced portfolio as a list: its constructions, and the steps that run them in order,
// each with the batch size up to which it runs (the gate) and its construction's parameters.
#pragma once

#include <cstddef>
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
  //! Only where the best plan so far is more than `gap` (a share) above the lower bound, and
  //! within `near` of it.
  double gap = 0;
  double near = std::numeric_limits<double>::infinity();
  //! For a sized or tied step: its plan is searched and kept only within this factor of the
  //! best plan so far.
  double keep_within = std::numeric_limits<double>::infinity();
  //! ...and on dense batches (`balanced_tuning::dense`) within this one too.
  double dense_keep_within = std::numeric_limits<double>::infinity();
  //! Only on dense batches (`balanced_tuning::dense`), raising up to `far_raise_area` there as
  //! the first levelled run does.
  bool dense = false;
  //! Only on batches that are not dense.
  bool sparse = false;
  //! For a tied step: how many times a sample may be raised (0: as far as its ties go), and
  //! whether the sizes tie within `loose_tie_area` rather than `tie_area`, or within
  //! `close_tie_area` where none tie within `tie_area`.
  std::int32_t tie_raises = 0;
  bool loose_ties = false;
  bool close_ties = false;
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
//! (tied: once, exactly and within a looser tie, and where nothing ties exactly within a close
//! one on batches that are not dense, up to `tied_near_limit` on every batch and past it near
//! the bound; then away from the bound as far as the ties go, exactly and loosely) and from
//! the target's sizes (sized), these with wide raises and free rides.
[[nodiscard]] inline std::vector<balanced_step> balanced_steps(const balanced_tuning& t) {
  using enum balanced_construction;
  constexpr std::int64_t always = std::numeric_limits<std::int64_t>::max();
  const std::int64_t variants = t.levelled_variants_limit;
  const detail::levelled_reach wide{t.reach_area, 0.0, true, t.wide_raise_area, t.free_ride};
  const double far = t.second_list_gap; // the second list's levelled steps: away from the bound
  // a tied step: raised `raises` times (0: as far as the ties go), `loose`ly or not
  const auto tied_step = [&](std::int64_t up_to, double gap, std::int32_t raises, bool loose) {
    return balanced_step{.construction = tied,
                         .up_to = up_to,
                         .reach = wide,
                         .second = true,
                         .gap = gap,
                         .dense_keep_within =
                             loose ? t.loose_tied_within : std::numeric_limits<double>::infinity(),
                         .tie_raises = raises,
                         .loose_ties = loose};
  };
  // the first tied step near the bound too, exactly and loosely (or `close`ly, where nothing
  // ties exactly, on batches that are not dense): on every batch up to `tied_near_limit`
  // (`large`: past it, only near the bound)
  const auto near_step = [&](bool large, bool loose, bool close = false) {
    balanced_step st = tied_step(large ? always : t.tied_near_limit, 0, 1, loose);
    st.close_ties = close;
    st.sparse = close;
    if (large) {
      st.above = t.tied_near_limit;
      st.near = far;
    }
    return st;
  };
  // a levelled variant of the second list, past the variants' limit and away from the bound
  const auto variant_step = [&](std::int64_t up_to, detail::levelled_reach reach) {
    return balanced_step{.construction = levelled,
                         .up_to = up_to,
                         .reach = reach,
                         .above = variants,
                         .second = true,
                         .gap = far};
  };
  return {
      {.construction = fixed_cp, .up_to = always, .least_area_size = true},
      {.construction = levelled,
       .up_to = always,
       .reach = {t.reach_area, 0.0, true, 0, t.free_ride}},
      {.construction = levelled,
       .up_to = t.free_ride && t.dense_without_rides ? always : -1,
       .reach = {t.reach_area, 0.0},
       .dense = true},
      {.construction = levelled, .up_to = variants, .reach = {t.reach_area, 0.0}},
      {.construction = levelled, .up_to = variants, .reach = {t.narrow_reach_area, 0.0}},
      {.construction = levelled, .up_to = variants, .reach = {t.wide_reach_area, 0.0}},
      {.construction = levelled,
       .up_to = t.heavy_share > 0 ? variants : -1,
       .reach = {t.narrow_reach_area, t.heavy_share}},
      {.construction = levelled,
       .up_to = variants,
       .reach = {t.reach_area, 0.0, true, t.wide_raise_area}},
      {.construction = fixed_cp, .up_to = t.static_limit},
      {.construction = targeted, .up_to = t.megatron_limit},
      {.construction = bisected, .up_to = t.bisected_limit},
      {.construction = chunked, .up_to = t.chunked_limit},
      // the second list
      variant_step(t.narrow_variant_limit, {t.narrow_reach_area, 0.0}),
      variant_step(t.wide_raise_variant_limit, {t.reach_area, 0.0, true, t.wide_raise_area}),
      variant_step(t.wide_raise_variant_limit, {t.reach_area, 0.0, true, t.far_raise_area}),
      near_step(false, false),
      near_step(false, true),
      near_step(true, false),
      near_step(true, true),
      near_step(false, false, /*close=*/true),
      near_step(true, false, /*close=*/true),
      tied_step(t.tied_limit, far, 0, false),
      tied_step(t.tied_limit, far, 0, true),
      {.construction = sized,
       .up_to = t.sized_limit,
       .reach = wide,
       .second = true,
       .keep_within = t.sized_within},
  };
}

namespace detail {

//! The next step after i of i's list that is a `c` one and `runs(j)` (the number of steps: none):
//! the step a run started ahead while step i runs in turn.
template <class Runs>
[[nodiscard]] std::size_t next_step(const std::vector<balanced_step>& steps, std::size_t i,
                                    balanced_construction c, const Runs& runs) {
  std::size_t next = i + 1;
  while (next < steps.size() &&
         !(steps[next].second == steps[i].second && steps[next].construction == c && runs(next)))
    ++next;
  return next;
}

} // namespace detail
} // namespace dcpp
