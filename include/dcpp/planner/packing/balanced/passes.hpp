// The state of one run of the balanced portfolio (portfolio.hpp): the problem's derived values,
// the best plan so far and the round allowance, how a plan is kept, and the passes after the
// steps, which run from a best plan (twice where the second list of steps wins: `balanced_run`).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "dcpp/core/config.hpp"
#include "dcpp/planner/bounds/least_area.hpp"
#include "dcpp/planner/bucketing.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/exchange.hpp"
#include "dcpp/planner/packing/balanced/idle_ranks.hpp"
#include "dcpp/planner/packing/balanced/local_search.hpp"
#include "dcpp/planner/packing/balanced/steps.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"

namespace dcpp::detail {

//! Tag: a `balanced_state` from another's best plan so far.
struct best_so_far_t {};
inline constexpr best_so_far_t best_so_far{};

//! The state of a run of `Policy` (a `balanced_with`) on a problem, and the passes after the
//! steps (`finish`). `exchange`: with the tile exchange.
template <class Policy, class Estimator>
class balanced_state {
public:
  using state = assignment<Estimator>;
  using bucketing_type = typename Policy::bucketing_type;

  balanced_state(const Policy& policy, const problem& pr, const Estimator& estimator, bool exchange)
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
        with_megatron_(size_ <= tuning_.megatron_limit) {}

  //! `run`'s problem and its best plan so far, with what the passes read with it (the problem's
  //! derived values copied, not worked out again): where the passes run from that plan.
  explicit balanced_state(const balanced_state& run, best_so_far_t /*tag*/)
      : policy_(run.policy_), tuning_(run.tuning_), pr_(run.pr_), estimator_(run.estimator_),
        exchange_(run.exchange_), o_(run.o_), costs_(run.costs_), buckets_(run.buckets_),
        size_(run.size_), dense_(run.dense_), candidates_(run.candidates_),
        least_area_(run.least_area_), k_min_(run.k_min_), allowed_(run.allowed_),
        bound_(run.bound_), floor_(run.floor_), with_megatron_(run.with_megatron_),
        best_(run.best_), best_step_(run.best_step_), have_plan_(run.have_plan_),
        megatron_plan_(run.megatron_plan_), megatron_pending_(run.megatron_pending_) {}

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

  [[nodiscard]] double best_step() const noexcept { return best_step_; }
  //! The best plan, moved out: the run is over.
  [[nodiscard]] plan take_best() noexcept { return std::move(best_); }

protected:
  static constexpr auto name = Policy::name;

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
  plan best_;
  double best_step_ = std::numeric_limits<double>::infinity();
  bool have_plan_ = false;
  plan megatron_plan_;
  bool megatron_pending_ = false;
};

} // namespace dcpp::detail
