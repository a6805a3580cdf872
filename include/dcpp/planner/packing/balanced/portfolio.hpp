// One run of the balanced portfolio (balanced.hpp): the best plan so far, the round allowance,
// and the steps that build and improve plans, each a member function; `run` calls them in order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ranges>
#include <tuple>
#include <utility>
#include <vector>

#include "dcpp/core/config.hpp"
#include "dcpp/core/math.hpp"
#include "dcpp/planner/bounds/gap.hpp"
#include "dcpp/planner/bounds/least_area.hpp"
#include "dcpp/planner/bucketing.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/exchange.hpp"
#include "dcpp/planner/packing/balanced/idle_ranks.hpp"
#include "dcpp/planner/packing/balanced/levelled.hpp"
#include "dcpp/planner/packing/balanced/levelled_runs.hpp"
#include "dcpp/planner/packing/balanced/local_search.hpp"
#include "dcpp/planner/packing/balanced/sized_runs.hpp"
#include "dcpp/planner/packing/balanced/steps.hpp"
#include "dcpp/planner/packing/balanced/targeted.hpp"
#include "dcpp/planner/packing/balanced/tiled.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"
#include "dcpp/planner/packing/static_cp.hpp"
#include "dcpp/planner/util/ahead.hpp"

namespace dcpp {

namespace detail {

//! One run of `Policy` (a `balanced_with`) on a problem: see `balanced_with` for what it does.
//! `exchange`: with the tile exchange.
template <class Policy, class Estimator>
class balanced_run {
public:
  using state = assignment<Estimator>;
  using bucketing_type = typename Policy::bucketing_type;

  balanced_run(const Policy& policy, const problem& pr, const Estimator& estimator, bool exchange)
      : policy_(policy), tuning_(policy.tuning), pr_(pr), estimator_(estimator),
        exchange_(exchange), o_(pr.options), costs_(pr, estimator),
        size_(std::int64_t{costs_.samples()} * o_.world_size),
        dense_(tuning_.dense(costs_.samples(), o_.world_size)),
        candidates_(size_ < tuning_.wide_search_limit ? tuning_.wide_candidates
                                                      : tuning_.narrow_candidates),
        least_area_(least_area_sizes(costs_, tuning_)),
        k_min_(token_lower_bound(costs_, least_area_)),
        allowed_(round_allowance(k_min_, policy_.extra_microbatches, o_.microbatch_multiple,
                                 tuning_.extra_rounds_divisor)),
        bound_(lower_bound(pr, estimator)),
        floor_(bound_ *
               (1 + (size_ <= tuning_.levelled_variants_limit ? tuning_.bound_reached
                                                              : tuning_.bound_reached_large))),
        with_megatron_(size_ <= tuning_.megatron_limit), steps_(balanced_steps(tuning_)) {}

  //! The steps, then the passes after them (`finish`). The second list of steps runs after the
  //! first; where its plan is the best, the passes also run from the first list's best (beside
  //! them on a second thread where `passes_beside`), and the faster result is kept (the first's
  //! on a tie): the passes may gain less from the second's plan than from the one it beat, and
  //! the second list must never make the plan slower.
  plan run() {
    start_with_megatron();
    levelled_.count([this](std::size_t i) { return runs(i); });
    run_steps(false);
    std::optional<std::tuple<plan, double, bool, std::size_t, bool>> first; // copied for a second
    if (std::ranges::any_of(std::views::iota(std::size_t{0}, steps_.size()),
                            [this](std::size_t i) { return steps_[i].second && runs(i); }))
      first.emplace(best_, best_step_, have_plan_, allowed_, megatron_pending_);
    run_steps(true);
    if (!first || best_step_ == std::get<1>(*first)) {
      finish();
      return std::move(best_);
    }
    balanced_run other(policy_, pr_, estimator_, exchange_); // the first list's best
    std::tie(other.best_, other.best_step_, other.have_plan_, other.allowed_,
             other.megatron_pending_) = std::move(*first);
    other.megatron_plan_ = megatron_plan_;
    ahead<bool> beside; // last: destroyed first, it waits for `other`
    if (!(passes_beside() && beside.start(0, [&other] { return other.finish(), true; })))
      other.finish();
    finish();
    beside.take(0);
    return best_step_ < other.best_step_ ? std::move(best_) : std::move(other.best_);
  }

private:
  static constexpr auto name = Policy::name;

  //! The passes after the steps, on the best plan.
  void finish() {
    if (megatron_pending_ && !at_bound()) {
      state a = state::from_plan(costs_, megatron_plan_);
      if (a.step_time() <= tuning_.megatron_improve_within * best_step_)
        keep_if_faster(a);
    }
    // no selected construction packed the batch within the bound: the megatron plan, improved
    if (!have_plan_)
      take_megatron(megatron_plan_);
    spill_into_new_rounds();
    final_search();
    grow_into_idle_ranks();
    megatron_with_few_samples();
    aligned_in_contiguous();
    exchange_best(); // last, once more: nothing runs after it, so it only makes the plan faster
  }

  //! Whether the passes run on a second thread: past `passes_beside_above`, where there they
  //! never call the estimator (every cost in the table, aligned groups, no megatron plan).
  [[nodiscard]] bool passes_beside() const {
    return tuning_.parallel_levelled && size_ > tuning_.passes_beside_above && costs_.tabulated() &&
           o_.group_topology == topology::aligned && !few_samples();
  }

  const bucket_list& buckets() {
    if (!buckets_)
      buckets_ = make_buckets(policy_.bucketing, pr_, estimator_);
    return *buckets_;
  }

  [[nodiscard]] plan megatron_pack() {
    return megatron_greedy_with<bucketing_type>{}.pack_in_order(pr_, estimator_, buckets());
  }

  //! A plan at the lower bound (`floor_`) cannot be beaten: what is left is skipped.
  [[nodiscard]] bool at_bound() const { return have_plan_ && best_step_ <= floor_; }
  //! Whether the best plan so far is within `gap` (a share) of the lower bound.
  [[nodiscard]] bool within_gap(double gap) const {
    return have_plan_ && best_step_ <= bound_ * (1 + gap);
  }
  //! Whether `st`'s `gap` or `near` skips it (never up to `ungated_limit`).
  [[nodiscard]] bool gated(const balanced_step& st) const {
    return size_ > tuning_.ungated_limit &&
           (within_gap(st.gap) || (have_plan_ && best_step_ > bound_ * (1 + st.near)));
  }

  //! `a` improved by the local search (`width` candidates per size, 0: `candidates_`) unless at
  //! the bound. It reads only members that stay put while the steps run: the runs ahead call it.
  void improve_unless_at_bound(state& a, std::int32_t width = 0) const {
    if (!(a.step_time() <= floor_))
      improve(a, tuning_, width > 0 ? width : candidates_);
  }

  //! `a` improved (`improve_unless_at_bound`; or `searched`, that call's result computed ahead,
  //! with the default width) where `search`, then kept when it is the fastest so far.
  void keep_if_faster(state& a, bool search = true, std::int32_t width = 0,
                      std::optional<state>* searched = nullptr) {
    DCPP_EXPECTS(searched == nullptr || width == 0);
    if (search) {
      if (searched != nullptr && searched->has_value())
        a = std::move(**searched);
      else
        improve_unless_at_bound(a, width);
    }
    detail::drop_empty_rounds(a, costs_, o_.microbatch_multiple, name);
    if (const double step = a.step_time(); step < best_step_) {
      best_step_ = step;
      best_ = a.to_plan(name);
      have_plan_ = true;
    }
  }

  //! ... where it is within the allowed rounds and (unless `however_far`) within
  //! `improve_within` of the best so far: too far behind, it is not worth improving.
  void consider(state& a, bool search = true, bool however_far = false,
                std::optional<state>* searched = nullptr) {
    if (static_cast<std::size_t>(a.rounds()) > allowed_ ||
        (!however_far && a.step_time() > tuning_.improve_within * best_step_))
      return;
    keep_if_faster(a, search, 0, searched);
  }

  //! The megatron plan, improved, as the best so far and its round count as the bound.
  void take_megatron(const plan& m) {
    allowed_ = std::max(allowed_, m.microbatches.size());
    state a = state::from_plan(costs_, m);
    best_step_ = std::numeric_limits<double>::infinity();
    keep_if_faster(a);
  }

  //! The megatron plan bounds the rounds and is the first candidate as it is; it is improved
  //! after the steps where within `megatron_improve_within` of the best.
  void start_with_megatron() {
    if (!with_megatron_)
      return;
    megatron_plan_ = megatron_pack();
    allowed_ = std::max(allowed_, megatron_plan_.microbatches.size());
    if (policy_.selected(balanced_construction::megatron)) {
      state a = state::from_plan(costs_, megatron_plan_);
      best_step_ = a.step_time();
      best_ = a.to_plan(name);
      have_plan_ = true;
      megatron_pending_ = true;
    }
  }

  [[nodiscard]] bool runs(std::size_t i) const {
    const balanced_step& st = steps_[i];
    if (i == levelled_.first() && !with_megatron_)
      return true; // the fallback past the megatron limit
    return policy_.selected(st.construction) && size_ <= st.up_to && size_ > st.above &&
           (!st.second || tuning_.second_list) && (!st.dense || dense_);
  }

  //! The steps of the first list, or of the `second` (see `balanced_tuning::second_list_gap`).
  void run_steps(bool second) {
    using enum balanced_construction;
    for (std::size_t i = 0; i < steps_.size() && !at_bound(); ++i) {
      const balanced_step& st = steps_[i];
      if (!runs(i) || st.second != second || gated(st))
        continue;
      switch (st.construction) {
      case levelled: run_levelled(i); break;
      case fixed_cp: run_fixed_cp(st); break;
      case targeted: run_targeted(); break;
      case chunked: run_chunked(); break;
      case bisected: run_bisected(); break;
      case sized:
      case tied: run_sized(i); break;
      case megatron: break; // ran first
      }
    }
  }

  //! The next step after i of i's list that runs and is a `c` one (the number of steps: none).
  [[nodiscard]] std::size_t next_of(std::size_t i, balanced_construction c) const {
    return next_step(steps_, i, c, [this](std::size_t j) { return runs(j); });
  }

  void run_levelled(std::size_t i) {
    typename levelled_runs<Estimator>::result r =
        levelled_.run(i, allowed_, next_of(i, balanced_construction::levelled),
                      [this](state& b) { improve_unless_at_bound(b); });
    state& a = r.built;
    if (levelled_.repeats(a, name))
      return;
    if (i == levelled_.first() && !with_megatron_ &&
        static_cast<std::size_t>(a.rounds()) > allowed_) {
      // past the megatron limit, the first levelled run needs more rounds than allowed: then
      // Megatron's count bounds them (the levelled rounds compete as a plan, in plan order)
      state as_plan = state::from_plan(costs_, a.to_plan(name));
      take_megatron(megatron_pack());
      consider(as_plan);
    } else {
      consider(a, true, false, &r.searched);
    }
  }

  //! Sized or tied step i (sized.hpp; the next one ahead), searched within its limit.
  void run_sized(std::size_t i) {
    const double best = have_plan_ ? best_step_ : std::numeric_limits<double>::infinity();
    typename sized_runs<Estimator>::result r =
        sized_.run(i, allowed_, next_of(i, balanced_construction::tied), best,
                   [this](state& b) { improve_unless_at_bound(b); });
    if (r.built && r.built->step_time() <= sized_.limit(i, best))
      consider(*r.built, true, false, &r.searched);
  }

  //! static_cp's plan at size `cp` (0: its own, the smallest that holds every sample).
  void consider_static(std::int32_t cp, bool search) {
    const static_cp_with<bucketing_type> fixed{cp};
    if (fixed.check(pr_).ok()) {
      state a = state::from_plan(costs_, fixed.pack_in_order(pr_, estimator_, buckets()));
      consider(a, search);
    }
  }

  void run_fixed_cp(const balanced_step& st) {
    if (!st.least_area_size) {
      consider_static(0, true);
      return;
    }
    // at the sizes of least total area (the static step makes static_cp's own size's plan);
    // where the size does not divide the world, the tiled construction fills the rest
    const bool search = size_ <= tuning_.levelled_variants_limit;
    const std::int32_t own = static_cp_with<bucketing_type>{}.resolve(pr_);
    for (const std::int32_t c : least_total_area_sizes(costs_, own, k_min_, tuning_)) {
      if (o_.world_size % c == 0) {
        if (c != own)
          consider_static(c, search);
      } else if (auto p = tiled(costs_, c, name, tuning_.tiled_limit,
                                static_cast<std::int64_t>(allowed_))) {
        state a = state::from_plan(costs_, *p);
        consider(a, search);
      }
    }
  }

  //! At the fewest rounds that pack, with the CP sizes raised toward the per-rank target.
  void run_targeted() {
    if (auto a = targeted_at_fewest(costs_, least_area_, k_min_, allowed_, o_.microbatch_multiple,
                                    buckets(), tuning_))
      consider(*a);
  }

  //! Each class's rounds as the gap term deals them (bounds/gap.hpp), the others packed again,
  //! where the best plan so far is not within `chunked_gap` of the lower bound; the plan is
  //! improved however far behind it starts (its runs are the point, the rest a raw packing).
  void run_chunked() {
    if (within_gap(tuning_.chunked_gap))
      return;
    for (const gap_class& c :
         gap_classes(pr_, estimator_, min_microbatches(pr_), microbatch_overhead(pr_, estimator_)))
      if (!c.runs.empty() && !at_bound())
        if (const std::optional<plan> p = policy_.chunked_plan(pr_, estimator_, c)) {
          state a = state::from_plan(costs_, *p);
          consider(a, true, true);
        }
  }

  //! The samples that need CP in rounds of their own, ranks halved between them (bisected.hpp),
  //! where the best is more than `chunked_gap` above the bound; at the round count whose plan
  //! is fastest as built (the search takes most of its time, and rarely reorders them).
  void run_bisected() {
    if (!within_gap(tuning_.chunked_gap))
      if (std::optional<state> a = policy_.bisected_plan(pr_, estimator_, costs_, allowed_))
        consider(*a);
  }

  //! Rounds no construction takes: the search once more on the best plan with a micro-batch
  //! multiple of empty rounds more, where moving samples pays the overhead (a dominant sample's
  //! round sheds its companions). Kept when faster, no round empty; up to `spill_passes` times.
  void spill_into_new_rounds() {
    const auto multiple = static_cast<std::size_t>(o_.microbatch_multiple);
    for (std::int32_t pass = 0; pass < tuning_.spill_passes && size_ <= tuning_.spill_limit &&
                                !at_bound() && best_.microbatches.size() + multiple <= allowed_;
         ++pass) {
      state a = state::from_plan(costs_, best_);
      for (std::size_t r = 0; r < multiple; ++r)
        a.add_round();
      improve(a, tuning_, candidates_);
      if (a.used_rounds() < a.rounds() || !(a.step_time() < best_step_))
        break;
      best_step_ = a.step_time();
      best_ = a.to_plan(name);
    }
  }

  //! Tiles of ranks traded between the best plan's rounds (`exchange_tiles`), kept where that is
  //! faster: the local search moves one sample at a time, this the contents of many ranks.
  void exchange_best() {
    if (!exchange_ || !have_plan_ || at_bound() || tuning_.tile_exchange_sweeps == 0 ||
        best_.microbatches.size() < 2)
      return;
    if (const auto step = exchange_plan_tiles(best_, best_step_, costs_, o_.world_size, tuning_)) {
      best_step_ = *step; // a round left empty costs its overhead: dropped
      detail::drop_empty_rounds(best_, best_step_, costs_, o_.microbatch_multiple, name);
    }
  }

  //! The best plan: the search once more with more candidates (`final_candidates_factor`), on
  //! small and on large batches, from the plan the exchange makes of it (where the search can
  //! then move single samples into the rounds the exchange has emptied of slow tiles).
  void final_search() {
    if (!((size_ < tuning_.wide_search_limit || size_ >= tuning_.final_search_from) &&
          tuning_.final_candidates_factor > 1 && !at_bound()))
      return;
    exchange_best();
    state a = state::from_plan(costs_, best_);
    keep_if_faster(a, true,
                   static_cast<std::int32_t>(std::min<std::int64_t>(
                       std::int64_t{candidates_} * tuning_.final_candidates_factor,
                       std::numeric_limits<std::int32_t>::max())));
  }

  //! Idle ranks left in a round go to their critical group (`grown_into_idle_ranks`).
  void grow_into_idle_ranks() {
    if (!have_plan_ || at_bound())
      return;
    if (const std::optional<plan> grown = grown_into_idle_ranks(best_, pr_, estimator_)) {
      state a = state::from_plan(costs_, *grown);
      keep_if_faster(a, false);
    }
  }

  //! Past the megatron limit with few samples per rank (where selected) the megatron plan...
  [[nodiscard]] bool few_samples() const {
    return !with_megatron_ && policy_.selected(balanced_construction::megatron) &&
           static_cast<double>(costs_.samples()) <=
               tuning_.megatron_share(o_.group_topology) * static_cast<double>(o_.world_size);
  }

  //! ...competes as it is.
  void megatron_with_few_samples() {
    if (few_samples() && !at_bound()) {
      state a = state::from_plan(costs_, megatron_pack());
      keep_if_faster(a, false);
    }
  }

  //! Contiguous groups: the portfolio once more on the aligned sizes alone, its plan improved by
  //! the local search, where the best so far is not within `aligned_gap` of the lower bound.
  void aligned_in_contiguous() {
    if (!(tuning_.aligned_in_contiguous && o_.group_topology == topology::contiguous &&
          have_plan_ && !within_gap(tuning_.aligned_gap)))
      return;
    if (std::optional<problem> aligned = aligned_problem(pr_, estimator_)) {
      Policy inner = policy_; // as before the second list but its tied steps; aligned megatron
      inner.tuning.narrow_variant_limit = inner.tuning.wide_raise_variant_limit = -1;
      inner.tuning.sized_limit = -1;
      inner.tuning.aligned_megatron_samples_per_rank = tuning_.megatron_samples_per_rank;
      state a = state::from_plan(costs_, inner.pack_with(*aligned, estimator_, true));
      if (static_cast<std::size_t>(a.rounds()) <= allowed_)
        keep_if_faster(a);
    }
  }

  const Policy& policy_;
  const balanced_tuning& tuning_;
  const problem& pr_;
  const Estimator& estimator_;
  const bool exchange_;
  const plan_options& o_;
  const cost_rows<Estimator> costs_;
  std::optional<bucket_list> buckets_; // made where a construction reads them
  const std::int64_t size_;            // samples x ranks
  const bool dense_;                   // tuning_.dense: past wide_raise_above, few per rank
  const std::int32_t candidates_;
  const sample_sizes least_area_;
  const std::int32_t k_min_;
  std::size_t allowed_;
  // the lower bound, and within the tuning's tolerance of it (a plan there is not searched)
  const double bound_;
  const double floor_;
  const bool with_megatron_;
  const std::vector<balanced_step> steps_;
  plan best_;
  double best_step_ = std::numeric_limits<double>::infinity();
  bool have_plan_ = false;
  plan megatron_plan_;
  bool megatron_pending_ = false;
  // the last two: they may have work ahead reading the rest
  sized_runs<Estimator> sized_{costs_, least_area_, steps_, k_min_, floor_, tuning_, dense_};
  levelled_runs<Estimator> levelled_{costs_, least_area_, steps_, tuning_, dense_};
};

} // namespace detail
} // namespace dcpp
