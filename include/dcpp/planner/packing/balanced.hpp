// balanced: dcpp's packing policy, a portfolio. Constructions build rounds (each a header of
// balanced/), the local search improves each result, the fastest plan within the micro-batch
// allowance is kept.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/gap_bound.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/bisected.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/exchange.hpp"
#include "dcpp/planner/packing/balanced/levelled.hpp"
#include "dcpp/planner/packing/balanced/local_search.hpp"
#include "dcpp/planner/packing/balanced/targeted.hpp"
#include "dcpp/planner/packing/balanced/tiled.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"
#include "dcpp/planner/packing/static_cp.hpp"

namespace dcpp {

//! The constructions of the `balanced` portfolio (docs/policies.md describes each).
enum class balanced_construction : std::uint8_t {
  megatron, //!< megatron_greedy's plan; also bounds the rounds of the others
  levelled, //!< balanced/levelled.hpp
  targeted, //!< balanced/targeted.hpp
  fixed_cp, //!< static_cp's plan: one CP size for every sample
  chunked,  //!< each class's gap-term rounds (gap_bound.hpp), the other samples packed again
  bisected, //!< balanced/bisected.hpp: the samples that need CP first, the others packed again
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
};

//! The steps after the megatron construction, in the order they run (an earlier plan wins a
//! tie; a plan at the lower bound ends them): one size for every sample at the sizes of least
//! total area (static_cp's plan, or the tiled one where the size does not divide the world);
//! levelled at the default reach with free rides (the one levelled run on large batches); the
//! same without; its four variants; static; targeted; bisected; chunked.
[[nodiscard]] inline std::vector<balanced_step> balanced_steps(const balanced_tuning& t) {
  using enum balanced_construction;
  const std::int64_t variants = t.levelled_variants_limit;
  return {
      {fixed_cp, std::numeric_limits<std::int64_t>::max(), {}, true},
      {levelled,
       std::numeric_limits<std::int64_t>::max(),
       {t.reach_area, 0.0, true, 0, t.free_ride}},
      {levelled, variants, {t.reach_area, 0.0}},
      {levelled, variants, {t.narrow_reach_area, 0.0}},
      {levelled, variants, {t.wide_reach_area, 0.0}},
      {levelled, t.heavy_share > 0 ? variants : -1, {t.narrow_reach_area, t.heavy_share}},
      {levelled, variants, {t.reach_area, 0.0, true, t.wide_raise_area}},
      {fixed_cp, t.static_limit, {}},
      {targeted, t.megatron_limit, {}},
      {bisected, t.bisected_limit, {}},
      {chunked, t.chunked_limit, {}},
  };
}

//! dcpp's own packing policy: a portfolio of constructions, each result improved by the local
//! search, the best kept (docs/policies.md tells the whole story).
//! * CP size per sample: the legal size with the least rank area `cp x cost`.
//! * Micro-batches: at most the token lower bound plus `extra_microbatches` (default: as many
//!   again, `tuning.extra_rounds_divisor`), or the megatron construction's count if larger; every
//!   round costs the micro-batch overhead (`microbatch_overhead(problem, estimator)`), so more
//!   rounds win only where they lower the step time by more than they cost.
//! * Steps: the megatron construction first (up to `tuning.megatron_limit`), then
//!   `balanced_steps(tuning)`; a step runs when its construction is selected and the batch is
//!   within its limit. A result over the allowed rounds, or `tuning.improve_within` slower than
//!   the best so far, is dropped; the others go through the local search.
//! * Fallbacks: when no selected construction yields a plan, the megatron plan (improved) is the
//!   result; past the megatron limit the levelled construction always runs, and if it needs more
//!   rounds than allowed, megatron_greedy's count becomes the bound after all.
//! * Tiles of ranks traded between the best plan's rounds (`detail::exchange_tiles`,
//!   `tuning.tile_exchange_sweeps`) where that lowers the step time: before the final search and
//!   last of all.
//! Where the megatron construction runs and is selected, a `balanced` plan is never slower than
//! `megatron_greedy`'s under the same estimator.
template <bucketing_policy Bucketing = by_cp_size>
struct balanced_with {
  static constexpr std::string_view name = "balanced";
  //! Rounds allowed beyond the token lower bound, in micro-batch multiples (a cap: rounds are
  //! taken only where they pay for their overhead); -1: 1/tuning.extra_rounds_divisor of the
  //! token minimum (as many again), at least one multiple.
  std::int32_t extra_microbatches = -1;
  //! Which constructions' plans compete (bits). The megatron construction runs within its limit
  //! whatever the bits, to bound the rounds.
  std::uint32_t constructions = 63;
  static constexpr std::uint32_t construct_megatron = 1;
  static constexpr std::uint32_t construct_levelled = 2;
  static constexpr std::uint32_t construct_targeted = 4;
  static constexpr std::uint32_t construct_static = 8;
  static constexpr std::uint32_t construct_chunked = 16;
  static constexpr std::uint32_t construct_bisected = 32;
  balanced_tuning tuning{};

  //! The order of the megatron, static and targeted constructions' samples. The buckets are
  //! made only where one of those runs (not past the limits, but for the megatron fallback).
  [[no_unique_address]] Bucketing bucketing{};

  [[nodiscard]] bool selected(balanced_construction c) const noexcept {
    return (constructions & (1u << static_cast<unsigned>(c))) != 0;
  }

  //! The tuning's own check (`balanced_tuning::check`): the planner runs it before packing.
  [[nodiscard]] status check(const problem&) const { return tuning.check(); }

  template <workload_estimator Estimator>
  plan pack(const problem& pr, const Estimator& estimator) const {
    return pack_with(pr, estimator, true);
  }

private:
  //! `pack`; `exchange`: with the tile exchange. The packing of the samples the chunked and
  //! bisected constructions leave goes without it: there it left plans slower than without it
  //! (5 of the benchmark's 180, by up to 0.03%), as the outer steps started from other plans.
  //! The aligned run in a contiguous world has it, so that a contiguous plan is never slower
  //! than the aligned one.
  template <workload_estimator Estimator>
  plan pack_with(const problem& pr, const Estimator& estimator, bool exchange) const;

  template <workload_estimator Estimator>
  std::optional<plan> chunked_plan(const problem& pr, const Estimator& estimator,
                                   const detail::gap_class& runs) const;
  template <workload_estimator Estimator>
  std::optional<detail::assignment<Estimator>>
  bisected_plan(const problem& pr, const Estimator& estimator,
                const detail::cost_rows<Estimator>& costs, std::size_t allowed) const;
  template <workload_estimator Estimator>
  std::vector<plan_microbatch> pack_apart(const problem& pr, const Estimator& estimator,
                                          const std::vector<bool>& placed) const;
};

//! balanced with the default bucketing (by_cp_size).
using balanced = balanced_with<>;

template <bucketing_policy Bucketing>
template <workload_estimator Estimator>
plan balanced_with<Bucketing>::pack_with(const problem& pr, const Estimator& estimator,
                                         bool exchange) const {
  throw_if_failed(tuning.check());
  using enum balanced_construction;
  using state = detail::assignment<Estimator>;
  const detail::cost_rows<Estimator> costs(pr, estimator);
  std::optional<bucket_list> made;
  const auto buckets = [&]() -> const bucket_list& {
    if (!made)
      made = make_buckets(bucketing, pr, estimator);
    return *made;
  };
  const plan_options& o = pr.options;
  const std::int64_t size = std::int64_t{costs.samples()} * o.world_size;
  const std::int32_t candidates =
      size < tuning.wide_search_limit ? tuning.wide_candidates : tuning.narrow_candidates;
  const detail::sample_sizes least_area = detail::least_area_sizes(costs, tuning);
  const std::int32_t k_min = detail::token_lower_bound(costs, least_area);

  // Rounds beyond the token minimum: `extra_microbatches`, or up to 1/extra_rounds_divisor more
  // (as many again; at least one micro-batch multiple). Every plan pays the micro-batch overhead
  // per round, so a construction that uses more rounds wins only where they lower step time +
  // overhead x micro-batches.
  std::int64_t extra = std::int64_t{extra_microbatches} * o.microbatch_multiple;
  if (extra_microbatches < 0) {
    const std::int64_t share = ceil_div<std::int64_t>(k_min, tuning.extra_rounds_divisor);
    extra = round_up<std::int64_t>(std::max<std::int64_t>(1, share), o.microbatch_multiple);
  }
  std::size_t allowed = static_cast<std::size_t>(k_min + extra);

  plan best;
  double best_step = std::numeric_limits<double>::infinity();
  bool have_plan = false;
  // the lower bound, within the tuning's tolerance: a plan there is not searched further
  const double bound = lower_bound(pr, estimator);
  const double floor =
      bound * (1 + (size <= tuning.levelled_variants_limit ? tuning.bound_reached
                                                           : tuning.bound_reached_large));
  // Rounds a plan leaves empty (the local search moves every sample out of a round where that
  // pays; the chunked construction's rounds may hold nothing but what it moves) are dropped, as
  // many as keep the count a multiple of the micro-batch multiple: each costs the micro-batch
  // overhead and holds nothing.
  const auto drop_empty_rounds = [&](state& a) {
    const std::int32_t used = a.used_rounds();
    std::int32_t drop = a.rounds() - round_up<std::int32_t>(used, o.microbatch_multiple);
    if (used == 0 || drop <= 0)
      return;
    plan p = a.to_plan(name);
    std::erase_if(p.microbatches,
                  [&](const plan_microbatch& mb) { return mb.groups.empty() && drop-- > 0; });
    a = state::from_plan(costs, p);
  };
  // `a` improved by the local search (with `width` candidates per size, 0: `candidates`) unless
  // it is at the bound, then kept when it is the fastest so far
  const auto keep_if_faster = [&](state& a, bool search = true, std::int32_t width = 0) {
    if (search && !(a.step_time() <= floor))
      detail::improve(a, tuning, width > 0 ? width : candidates);
    drop_empty_rounds(a);
    if (const double step = a.step_time(); step < best_step) {
      best_step = step;
      best = a.to_plan(name);
      have_plan = true;
    }
  };
  // ... where it is within the allowed rounds and (unless `however_far`) within
  // `improve_within` of the best so far: too far behind, it is not worth improving
  const auto consider = [&](state& a, bool search = true, bool however_far = false) {
    if (static_cast<std::size_t>(a.rounds()) > allowed ||
        (!however_far && a.step_time() > tuning.improve_within * best_step))
      return;
    keep_if_faster(a, search);
  };
  // the megatron plan, improved, as the best so far and its round count as the bound
  const auto take_megatron = [&](const plan& m) {
    allowed = std::max(allowed, m.microbatches.size());
    state a = state::from_plan(costs, m);
    best_step = std::numeric_limits<double>::infinity();
    keep_if_faster(a);
  };

  const bool with_megatron = size <= tuning.megatron_limit;
  const plan megatron_plan =
      with_megatron ? megatron_greedy_with<Bucketing>{}.pack_in_order(pr, estimator, buckets())
                    : plan{};
  // The megatron plan bounds the rounds and is the first candidate as it is; the local search
  // improves it after the other steps, where it is then within `megatron_improve_within` of the
  // best (see there).
  bool megatron_pending = false;
  if (with_megatron) {
    allowed = std::max(allowed, megatron_plan.microbatches.size());
    if (selected(megatron)) {
      state a = state::from_plan(costs, megatron_plan);
      best_step = a.step_time();
      best = a.to_plan(name);
      have_plan = true;
      megatron_pending = true;
    }
  }

  const std::vector<balanced_step> steps = balanced_steps(tuning);
  // the levelled runs share their start; the last one takes it over
  std::optional<detail::levelled_start> start;
  std::size_t levelled_runs = 0;
  const auto first_levelled = static_cast<std::size_t>(
      std::find_if(steps.begin(), steps.end(),
                   [](const balanced_step& st) { return st.construction == levelled; }) -
      steps.begin());
  const auto runs = [&](std::size_t i) {
    const balanced_step& st = steps[i];
    if (i == first_levelled && !with_megatron)
      return true; // the fallback past the megatron limit
    return selected(st.construction) && size <= st.up_to;
  };
  for (std::size_t i = 0; i < steps.size(); ++i)
    levelled_runs += runs(i) && steps[i].construction == levelled ? 1 : 0;
  const std::size_t levelled_runs_total = levelled_runs;
  std::vector<std::vector<plan_microbatch>> levelled_built; // the levelled runs' rounds so far

  // a plan at the lower bound (`floor`) cannot be beaten: the remaining steps and the spill
  // pass are skipped
  const auto at_bound = [&] { return have_plan && best_step <= floor; };
  for (std::size_t i = 0; i < steps.size() && !at_bound(); ++i) {
    if (!runs(i))
      continue;
    const balanced_step& st = steps[i];
    switch (st.construction) {
    case levelled: {
      if (!start)
        start = detail::levelled_inputs(costs, least_area);
      std::vector<detail::levelled_slot> slots =
          --levelled_runs == 0 ? std::move(start->slots) : start->slots;
      state a = detail::levelled(costs, std::move(slots), *start,
                                 static_cast<std::int64_t>(allowed), st.reach, tuning);
      // The levelled variants often build the same rounds (small batches, where all run): the
      // local search, a function of those rounds, would only repeat itself, to a plan that
      // cannot win (an earlier one wins a tie)
      if (levelled_runs_total > 1) {
        std::vector<plan_microbatch> built = a.to_plan(name).microbatches;
        if (std::find(levelled_built.begin(), levelled_built.end(), built) != levelled_built.end())
          break;
        levelled_built.push_back(std::move(built));
      }
      if (i == first_levelled && !with_megatron && static_cast<std::size_t>(a.rounds()) > allowed) {
        // the first levelled run past the megatron limit needs more rounds than allowed:
        // Megatron's count is the bound after all (the levelled rounds then compete as a plan:
        // groups and samples in plan order)
        state as_plan = state::from_plan(costs, a.to_plan(name));
        take_megatron(megatron_greedy_with<Bucketing>{}.pack_in_order(pr, estimator, buckets()));
        consider(as_plan);
      } else {
        consider(a);
      }
      break;
    }
    case fixed_cp: {
      // static_cp's plan at size `cp` (0: its own, the smallest that holds every sample)
      const auto consider_static = [&](std::int32_t cp, bool search) {
        const static_cp_with<Bucketing> fixed{cp};
        if (fixed.check(pr).ok()) {
          state a = state::from_plan(costs, fixed.pack_in_order(pr, estimator, buckets()));
          consider(a, search);
        }
      };
      if (!st.least_area_size) {
        consider_static(0, true);
        break;
      }
      // at the sizes of least total area (the static step makes static_cp's own size's plan);
      // where the size does not divide the world, the tiled construction fills the rest
      const bool search = size <= tuning.levelled_variants_limit;
      const std::int32_t own = static_cp_with<Bucketing>{}.resolve(pr);
      for (const std::int32_t c : detail::least_total_area_sizes(costs, own, k_min, tuning)) {
        if (o.world_size % c == 0) {
          if (c != own)
            consider_static(c, search);
        } else if (auto p = detail::tiled(costs, c, name, tuning.tiled_limit,
                                          static_cast<std::int64_t>(allowed))) {
          state a = state::from_plan(costs, *p);
          consider(a, search);
        }
      }
      break;
    }
    case targeted:
      // at the fewest rounds that pack, with the CP sizes raised toward the per-rank target
      for (std::int32_t k = k_min; static_cast<std::size_t>(k) <= allowed;
           k += o.microbatch_multiple) {
        detail::sample_sizes sizes = least_area;
        const double target = detail::raise_toward_target(sizes, costs, k, tuning);
        const std::vector<std::int32_t> order = detail::placement_order(buckets(), sizes);
        if (auto a = detail::targeted(costs, std::move(sizes), target, k, order, tuning)) {
          consider(*a);
          break;
        }
      }
      break;
    case chunked:
      // each class's rounds as the gap term deals them (gap_bound.hpp), the others packed again,
      // where the best plan so far is not within `chunked_gap` of the lower bound; the plan is
      // improved however far behind it starts (its runs are the point, the rest a raw packing)
      if (!(have_plan && best_step <= bound * (1 + tuning.chunked_gap)))
        for (const detail::gap_class& c : detail::gap_classes(pr, estimator, min_microbatches(pr),
                                                              microbatch_overhead(pr, estimator)))
          if (!c.runs.empty() && !at_bound())
            if (const std::optional<plan> p = chunked_plan(pr, estimator, c)) {
              state a = state::from_plan(costs, *p);
              consider(a, true, true);
            }
      break;
    case bisected:
      // the samples that need CP in rounds of their own, each round's ranks halved between them
      // (balanced/bisected.hpp), where the best plan so far is not within `chunked_gap` of the
      // lower bound
      // (its plan at the round count whose plan is fastest as it is: the local search takes
      // most of the construction's time, and rarely reorders them)
      if (!(have_plan && best_step <= bound * (1 + tuning.chunked_gap)))
        if (std::optional<state> a = bisected_plan(pr, estimator, costs, allowed))
          consider(*a);
      break;
    case megatron: break; // ran first
    }
  }
  if (megatron_pending && !at_bound()) {
    state a = state::from_plan(costs, megatron_plan);
    if (a.step_time() <= tuning.megatron_improve_within * best_step)
      keep_if_faster(a);
  }
  // no selected construction packed the batch within the bound: the megatron plan, improved
  if (!have_plan)
    take_megatron(megatron_plan);

  // Rounds no construction takes: the local search once more on the best plan with one more
  // micro-batch multiple of empty rounds, into which it may move samples where that pays the
  // overhead (a dominant sample's round sheds its small companions). Kept when it is faster and
  // leaves no round empty.
  // Repeated while it pays, up to `tuning.spill_passes` times.
  const auto multiple = static_cast<std::size_t>(o.microbatch_multiple);
  for (std::int32_t pass = 0; pass < tuning.spill_passes && size <= tuning.spill_limit &&
                              !at_bound() && best.microbatches.size() + multiple <= allowed;
       ++pass) {
    state a = state::from_plan(costs, best);
    for (std::size_t r = 0; r < multiple; ++r)
      a.add_round();
    detail::improve(a, tuning, candidates);
    if (a.used_rounds() < a.rounds() || !(a.step_time() < best_step))
      break;
    best_step = a.step_time();
    best = a.to_plan(name);
  }
  // Tiles of ranks traded between the best plan's rounds (detail::exchange_tiles), kept where
  // that is faster: the local search moves one sample at a time, this the contents of many
  // ranks (where `exchange`).
  const auto exchange_best = [&] {
    if (!exchange || !have_plan || at_bound() || tuning.tile_exchange_sweeps == 0 ||
        best.microbatches.size() < 2)
      return;
    std::vector<detail::exchanged_group> groups;
    std::vector<double> maxima;
    detail::exchange_inputs(best, costs, groups, maxima);
    if (!detail::exchange_tiles(groups, maxima, o.world_size, tuning))
      return;
    // the step time as the state sums it (the loads are the same sums)
    double step = static_cast<double>(maxima.size()) * costs.overhead();
    for (const double m : maxima)
      step += m;
    if (!(step < best_step))
      return;
    detail::move_exchanged(best, groups);
    best_step = step;
    if (std::ranges::any_of(best.microbatches,
                            [](const plan_microbatch& mb) { return mb.groups.empty(); })) {
      state a = state::from_plan(costs, best); // a round left empty costs its overhead
      drop_empty_rounds(a);
      best_step = a.step_time();
      best = a.to_plan(name);
    }
  };
  // The best plan: the search once more with more candidates (`final_candidates_factor`), on
  // small and on large batches, from the plan the exchange makes of it (where the search can
  // then move single samples into the rounds the exchange has emptied of slow tiles)
  if ((size < tuning.wide_search_limit || size >= tuning.final_search_from) &&
      tuning.final_candidates_factor > 1 && !at_bound()) {
    exchange_best();
    state a = state::from_plan(costs, best);
    keep_if_faster(a, true,
                   static_cast<std::int32_t>(std::min<std::int64_t>(
                       std::int64_t{candidates} * tuning.final_candidates_factor,
                       std::numeric_limits<std::int32_t>::max())));
  }
  // Idle ranks left in a round: its critical group grows into them while that makes the round
  // faster (microbatch_state::grow_critical_into_idle_ranks). Where no construction fills the
  // world (more ranks than samples, past the megatron limit) this is what keeps the plan from
  // leaving most ranks idle; elsewhere the rounds have no idle ranks and nothing changes.
  if (have_plan && !at_bound()) {
    std::optional<plan> grown; // the best plan with its grown rounds, copied at the first one
    for (std::size_t m = 0; m < best.microbatches.size(); ++m) {
      const plan_microbatch& mb = best.microbatches[m];
      std::int32_t busy = 0;
      for (const auto& g : mb.groups)
        busy += g.cp;
      if (busy >= o.world_size)
        continue;
      detail::microbatch_state round(o.world_size);
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
    if (grown) {
      state a = state::from_plan(costs, *grown);
      if (a.step_time() < best_step) {
        best_step = a.step_time();
        best = a.to_plan(name);
      }
    }
  }
  // past the megatron limit with few samples per rank: the megatron plan as it is (see
  // `megatron_samples_per_rank`)
  if (!with_megatron && selected(megatron) && !at_bound() &&
      static_cast<double>(costs.samples()) <=
          tuning.megatron_samples_per_rank * static_cast<double>(o.world_size)) {
    state a = state::from_plan(
        costs, megatron_greedy_with<Bucketing>{}.pack_in_order(pr, estimator, buckets()));
    keep_if_faster(a, false);
  }
  // Contiguous groups: the portfolio once more on the aligned sizes alone, its plan improved by
  // the local search here, where the best so far is not within `aligned_gap` of the lower bound
  // (see `aligned_in_contiguous`).
  if (tuning.aligned_in_contiguous && o.group_topology == topology::contiguous && have_plan &&
      best_step > bound * (1 + tuning.aligned_gap)) {
    if (std::optional<problem> aligned = detail::aligned_problem(pr, estimator)) {
      state a = state::from_plan(costs, pack_with(*aligned, estimator, true));
      if (static_cast<std::size_t>(a.rounds()) <= allowed)
        keep_if_faster(a);
    }
  }

  // Last, the exchange once more: nothing runs after it, so that it only ever makes the plan
  // faster.
  exchange_best();
  return best;
}

//! The chunked construction for one class: the members of each run of its gap term
//! (`detail::gap_class`) on groups of the class's smallest size, in as many rounds as the world
//! needs for them (runs halved where that makes the rounds a multiple of the micro-batch
//! multiple; none where it cannot), then the other samples packed by this policy without this
//! construction (at the batch's micro-batch overhead), their rounds after. Where the gap term's
//! rounds are the best dealing of the class (bimodal/96/s1: 95 samples of 33K-66K tokens that
//! need 16 ranks, 16 rounds of six in a row as other constructions deal them, 23 in runs of one
//! to eight), the local search then fills the runs' free ranks from the other rounds.
template <bucketing_policy Bucketing>
template <workload_estimator Estimator>
std::optional<plan> balanced_with<Bucketing>::chunked_plan(const problem& pr,
                                                           const Estimator& estimator,
                                                           const detail::gap_class& runs) const {
  const plan_options& o = pr.options;
  // the fastest run first: the local search, which sweeps the rounds in order, then fills the
  // runs from the other rounds to 15.38 s on bimodal/96/s1 where the slowest first ends at 17.4
  const auto per_round = static_cast<std::size_t>(o.world_size / runs.smallest);
  std::vector<std::vector<std::int32_t>> rounds;
  for (auto run = runs.runs.rbegin(); run != runs.runs.rend(); ++run)
    for (std::size_t at = 0; at < run->size(); at += per_round)
      rounds.emplace_back(run->begin() + static_cast<std::ptrdiff_t>(at),
                          run->begin() +
                              static_cast<std::ptrdiff_t>(std::min(run->size(), at + per_round)));
  const auto multiple = static_cast<std::size_t>(o.microbatch_multiple);
  while (rounds.size() % multiple != 0) {
    const auto fullest =
        std::max_element(rounds.begin(), rounds.end(),
                         [](const auto& a, const auto& b) { return a.size() < b.size(); });
    if (fullest->size() < 2)
      return std::nullopt;
    std::vector<std::int32_t> half(
        fullest->begin() + static_cast<std::ptrdiff_t>(fullest->size() / 2), fullest->end());
    fullest->resize(fullest->size() / 2);
    rounds.insert(fullest + 1, std::move(half));
  }
  plan p;
  p.world_size = o.world_size;
  p.max_tokens_per_rank = o.max_tokens_per_rank;
  p.lengths = pr.lengths;
  std::vector<bool> placed(pr.size(), false);
  for (const std::vector<std::int32_t>& members : rounds) {
    plan_microbatch& mb = p.microbatches.emplace_back();
    for (std::size_t k = 0; k < members.size(); ++k) {
      const auto rank = static_cast<std::int32_t>(k) * runs.smallest;
      mb.groups.push_back({rank, runs.smallest, {members[k]}, 0, 0.0});
      placed[static_cast<std::size_t>(members[k])] = true;
    }
  }
  for (plan_microbatch& mb : pack_apart(pr, estimator, placed))
    p.microbatches.push_back(std::move(mb));
  return p;
}

//! The rounds of the samples not `placed`, packed by this policy as a batch of their own (at the
//! batch's micro-batch overhead) without the constructions that call this, in batch sample ids.
template <bucketing_policy Bucketing>
template <workload_estimator Estimator>
std::vector<plan_microbatch>
balanced_with<Bucketing>::pack_apart(const problem& pr, const Estimator& estimator,
                                     const std::vector<bool>& placed) const {
  std::vector<std::int64_t> rest;
  std::vector<std::int32_t> id_of; // the rest's sample ids in the batch
  for (std::size_t i = 0; i < pr.size(); ++i)
    if (!placed[i]) {
      rest.push_back(pr.lengths[i]);
      id_of.push_back(static_cast<std::int32_t>(i));
    }
  if (rest.empty())
    return {};
  plan_options rest_options = pr.options;
  rest_options.microbatch_overhead = microbatch_overhead(pr, estimator);
  problem others = make_problem(rest_options, rest);
  if (!pr.cost_row.empty())
    tabulate_costs(others, estimator);
  balanced_with inner = *this;
  inner.constructions &= ~(construct_chunked | construct_bisected);
  std::vector<plan_microbatch> rounds = inner.pack_with(others, estimator, false).microbatches;
  for (plan_microbatch& mb : rounds)
    for (plan_group& g : mb.groups)
      for (std::int32_t& s : g.samples)
        s = id_of[static_cast<std::size_t>(s)];
  return rounds;
}

//! The bisected construction's plan (balanced/bisected.hpp): the samples that need CP (a
//! smallest legal size of 2 or more; at most `tuning.bisected_samples`) in rounds of their own,
//! the other samples' rounds after them (packed once, `pack_apart`); of the round counts from
//! the fewest their tokens allow (at `tuning.bisected_fill` of the world's) to
//! `tuning.bisected_extra_rounds` micro-batch multiples more, within `allowed` rounds in all,
//! the plan that is fastest as it is.
template <bucketing_policy Bucketing>
template <workload_estimator Estimator>
std::optional<detail::assignment<Estimator>>
balanced_with<Bucketing>::bisected_plan(const problem& pr, const Estimator& estimator,
                                        const detail::cost_rows<Estimator>& costs,
                                        std::size_t allowed) const {
  const plan_options& o = pr.options;
  std::vector<std::int32_t> members;
  std::vector<bool> placed(pr.size(), false);
  double tokens = 0;
  for (std::size_t i = 0; i < pr.size(); ++i)
    if (pr.min_cp_of[i] >= 2) {
      members.push_back(static_cast<std::int32_t>(i));
      placed[i] = true;
      tokens += static_cast<double>(pr.lengths[i]);
    }
  const double room = tuning.bisected_fill * static_cast<double>(o.max_tokens_per_rank) *
                      static_cast<double>(o.world_size);
  const auto fewest = round_up<std::int64_t>(
      std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(tokens / room))),
      o.microbatch_multiple);
  if (members.empty() ||
      members.size() > std::min<std::size_t>(static_cast<std::size_t>(tuning.bisected_samples),
                                             detail::bisector<Estimator>::most_members) ||
      static_cast<double>(members.size()) >
          tuning.bisected_round_samples * static_cast<double>(fewest))
    return std::nullopt;
  const std::vector<plan_microbatch> rest = pack_apart(pr, estimator, placed);
  const detail::bisector<Estimator> halving(pr, estimator, members, tuning.bisected_exhaustive,
                                            tuning.bisected_splits);
  // the search's work in proportion to the batch's size
  const detail::bisected_search search{
      .fill = tuning.bisected_fill,
      .steps = tuning.bisected_steps,
      .trials = tuning.bisected_trials,
      .layouts = static_cast<std::size_t>(tuning.bisected_layouts),
      .work = static_cast<std::int64_t>(
          std::min(9e18, tuning.bisected_work * static_cast<double>(pr.size()) * o.world_size))};
  // the other samples, and their least rank areas' sum: what the ranks a layout leaves free
  // can hold (`detail::reserved_blocks`)
  std::vector<std::int32_t> others;
  double others_area = 0;
  for (std::size_t i = 0; i < pr.size(); ++i)
    if (!placed[i]) {
      others.push_back(static_cast<std::int32_t>(i));
      others_area += detail::least_of_sample(pr, estimator, i).area;
    }
  std::optional<detail::assignment<Estimator>> fastest;
  const auto take = [&](const std::vector<plan_microbatch>& rounds) {
    if (rounds.size() > allowed)
      return;
    detail::assignment<Estimator> a =
        detail::assignment<Estimator>::from_microbatches(costs, rounds);
    if (!fastest || a.step_time() < fastest->step_time())
      fastest = std::move(a);
  };
  // the round count whose rounds, with ranks left free, promise the least (each such plan
  // packs the samples the free ranks do not take once more: 1.4-1.8x the construction's work
  // were it built at every count)
  struct reserve_choice {
    double estimate = std::numeric_limits<double>::infinity();
    std::vector<typename detail::bisector<Estimator>::set> dealt;
    std::vector<std::int32_t> blocks;
    std::vector<double> times; // each round's time on its block
  } reserve;
  for (std::int64_t k = fewest;
       k <= fewest + std::int64_t{tuning.bisected_extra_rounds} * o.microbatch_multiple &&
       static_cast<std::size_t>(k) <= members.size() && static_cast<std::size_t>(k) <= allowed;
       k += o.microbatch_multiple) {
    auto dealt = detail::deal_rounds(pr, static_cast<std::int32_t>(k), search, halving);
    if (!dealt)
      continue;
    // the rounds on the whole world, the others' rounds after them
    const std::vector<std::int32_t> whole(dealt->size(), o.world_size);
    std::vector<plan_microbatch> rounds = detail::lay_out<Estimator>(*dealt, whole, halving);
    rounds.insert(rounds.end(), rest.begin(), rest.end());
    take(rounds);
    if (!tuning.bisected_reserve || others.empty())
      continue;
    detail::reserved_layout r =
        detail::reserved_blocks<Estimator>(*dealt, others_area, o.world_size, halving);
    if (const double e = r.objective + static_cast<double>(k) * costs.overhead();
        e < reserve.estimate)
      reserve = {e, std::move(*dealt), std::move(r.blocks), std::move(r.times)};
  }
  // that count's rounds on blocks that leave ranks free, the others first into those, the rest
  // of them packed apart
  if (reserve.dealt.empty())
    return fastest;
  std::vector<plan_microbatch> reserved =
      detail::lay_out<Estimator>(reserve.dealt, reserve.blocks, halving);
  const std::vector<std::int32_t> left =
      detail::fill_free_ranks(pr, estimator, reserved, reserve.times, others);
  if (left.size() == others.size())
    return fastest; // the free ranks took none of them: the rounds above, or slower
  if (!left.empty()) {
    std::vector<bool> out_of_left(pr.size(), true);
    for (const std::int32_t s : left)
      out_of_left[static_cast<std::size_t>(s)] = false;
    const std::vector<plan_microbatch> more = pack_apart(pr, estimator, out_of_left);
    reserved.insert(reserved.end(), more.begin(), more.end());
  }
  take(reserved);
  return fastest;
}

} // namespace dcpp
