// One run of the balanced portfolio (balanced.hpp): the steps that build and improve plans, each
// a member function, on the run's state (balanced/passes.hpp); `run` calls them in order, then
// the passes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ranges>
#include <utility>
#include <vector>

#include "dcpp/core/config.hpp"
#include "dcpp/planner/bounds/gap.hpp"
#include "dcpp/planner/bucketing.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/levelled.hpp"
#include "dcpp/planner/packing/balanced/levelled_runs.hpp"
#include "dcpp/planner/packing/balanced/passes.hpp"
#include "dcpp/planner/packing/balanced/sized_runs.hpp"
#include "dcpp/planner/packing/balanced/steps.hpp"
#include "dcpp/planner/packing/balanced/targeted.hpp"
#include "dcpp/planner/packing/balanced/tiled.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/packing/static_cp.hpp"
#include "dcpp/planner/util/ahead.hpp"

namespace dcpp {

namespace detail {

//! One run of `Policy` (a `balanced_with`) on a problem: see `balanced_with` for what it does.
//! `exchange`: with the tile exchange.
template <class Policy, class Estimator>
class balanced_run : public balanced_state<Policy, Estimator> {
  using base = balanced_state<Policy, Estimator>;

public:
  using typename base::bucketing_type;
  using typename base::state;

  balanced_run(const Policy& policy, const problem& pr, const Estimator& estimator, bool exchange)
      : base(policy, pr, estimator, exchange), steps_(balanced_steps(tuning_)) {}

  //! The steps, then the passes after them (`finish`). The second list of steps runs after the
  //! first; where its plan is the best, the passes also run from the first list's best, and the
  //! faster result is kept (the first's on a tie): the passes may gain less from the second's
  //! plan than from the one it beat, and the second list must never make the plan slower. Where
  //! `passes_beside`, the passes from the first list's best start on a second thread as soon as
  //! that list ends, beside the second: where the second's plan does not win they are the passes
  //! the run needs (on the same plan), so nothing is computed twice.
  plan run() {
    start_with_megatron();
    levelled_.count([this](std::size_t i) { return runs(i); });
    run_steps(false);
    if (!std::ranges::any_of(std::views::iota(std::size_t{0}, steps_.size()),
                             [this](std::size_t i) { return steps_[i].second && runs(i); })) {
      finish();
      return std::move(best_);
    }
    const double first_step = best_step_;
    base other(*this, best_so_far); // for the passes from the first list's best
    ahead<bool> beside;             // destroyed before `other`: it waits for the passes
    const bool started = passes_beside() && beside.start(0, [this, &other] {
      first_passes_go_.wait();
      return other.finish(), true;
    });
    const struct opener {
      gate& g;
      ~opener() { g.open(); } // before `beside` waits for the passes, however the steps end
    } open_at_end{first_passes_go_};
    if (started)
      sized_.open_when_ahead_done(&first_passes_go_);
    run_steps(true);
    first_passes_go_.open();
    if (best_step_ == first_step) { // the first list's best is the run's: so are its passes
      if (!started)
        other.finish();
      beside.take(0);
      return other.take_best();
    }
    if (!started)
      other.finish();
    finish();
    beside.take(0);
    return best_step_ < other.best_step() ? std::move(best_) : other.take_best();
  }

private:
  // the state's members this run reads and changes (a dependent base's names are not found
  // unqualified)
  using base::allowed_, base::at_bound, base::best_, base::best_step_, base::bound_, base::buckets,
      base::candidates_, base::consider, base::costs_, base::dense_, base::estimator_, base::finish,
      base::floor_, base::have_plan_, base::improve_unless_at_bound, base::k_min_,
      base::keep_if_faster, base::least_area_, base::megatron_pack, base::megatron_pending_,
      base::megatron_plan_, base::name, base::o_, base::passes_beside, base::policy_, base::pr_,
      base::size_, base::take_megatron, base::tuning_, base::with_megatron_, base::within_gap;

  //! Whether `st`'s `gap` or `near` skips it (never up to `ungated_limit`).
  [[nodiscard]] bool gated(const balanced_step& st) const {
    return size_ > tuning_.ungated_limit &&
           (within_gap(st.gap) || (have_plan_ && best_step_ > bound_ * (1 + st.near)));
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
           (!st.second || tuning_.second_list) && (!st.dense || dense_) &&
           (!st.sparse || !dense_) && (!st.close_ties || !ties_exactly());
  }

  //! Whether some sample's next size ties exactly in area (then the close tied steps do not
  //! run: the exact one stands where they would), worked out once.
  [[nodiscard]] bool ties_exactly() const {
    if (!ties_exactly_)
      ties_exactly_ = tied_sizes(least_area_, costs_, 1, tuning_.tie_area).has_value();
    return *ties_exactly_;
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

  const std::vector<balanced_step> steps_;
  mutable std::optional<bool> ties_exactly_; // `ties_exactly()`, once asked
  gate first_passes_go_; // the passes from the first list's best start beside the second's
  // the last two: they may have work ahead reading the rest
  sized_runs<Estimator> sized_{costs_, least_area_, steps_, k_min_, floor_, tuning_, dense_};
  levelled_runs<Estimator> levelled_{costs_, least_area_, steps_, tuning_, dense_};
};

} // namespace detail
} // namespace dcpp
