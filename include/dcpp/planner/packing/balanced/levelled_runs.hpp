// The balanced portfolio's levelled runs (portfolio.hpp): their shared start, worked out once;
// each step's construction; the rounds the runs built so far; and, with `parallel_levelled`, the
// next run built and searched ahead on a second thread where it is a dense step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/levelled.hpp"
#include "dcpp/planner/packing/balanced/levelled_inputs.hpp"
#include "dcpp/planner/packing/balanced/steps.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/util/ahead.hpp"

namespace dcpp::detail {

template <class Estimator>
class levelled_runs {
public:
  using state = assignment<Estimator>;

  //! A run as built, and searched by the portfolio's search when it ran ahead.
  struct result {
    state built;
    std::optional<state> searched;
  };

  //! `dense`: the batch is dense (`balanced_tuning::dense`), where the first levelled run and the
  //! dense steps raise up to `far_raise_area`.
  levelled_runs(const cost_rows<Estimator>& costs, const sample_sizes& least_area,
                const std::vector<balanced_step>& steps, const balanced_tuning& tuning, bool dense)
      : costs_(costs), least_area_(least_area), steps_(steps), tuning_(tuning), dense_(dense),
        first_(static_cast<std::size_t>(std::find_if(steps.begin(), steps.end(),
                                                     [](const balanced_step& st) {
                                                       return st.construction ==
                                                              balanced_construction::levelled;
                                                     }) -
                                        steps.begin())) {}

  //! The first levelled step (the number of steps: none).
  [[nodiscard]] std::size_t first() const noexcept { return first_; }

  //! Counts the runs, `runs(i)` saying whether step i runs.
  template <class Runs>
  void count(const Runs& runs) {
    for (std::size_t i = 0; i < steps_.size(); ++i)
      left_ += runs(i) && steps_[i].construction == balanced_construction::levelled ? 1 : 0;
    total_ = left_;
  }

  //! Step i's run within `allowed` rounds. `next`: the next levelled step of i's list that runs
  //! (the number of steps: none), started ahead where it is a dense step, with the same
  //! allowance, and the cost table holds every entry (the estimator is never called from the
  //! second thread); taken here in its turn when the allowance is still the same. A run ahead is
  //! also searched there by `search(state&)`, the portfolio's own search (so that a run ahead is
  //! searched as in turn): it must read only what stays as it is while the steps run.
  template <class Search>
  [[nodiscard]] result run(std::size_t i, std::size_t allowed, std::size_t next,
                           const Search& search) {
    // the runs share their start; the last one takes it over
    if (!start_)
      start_ = levelled_inputs(costs_, least_area_);
    const bool last = --left_ == 0;
    if (std::optional<result> r = ahead_.take(key(i, allowed)))
      return std::move(*r);
    std::vector<levelled_slot> slots = last ? std::move(start_->slots) : start_->slots;
    if (tuning_.parallel_levelled && next < steps_.size() && steps_[next].dense &&
        costs_.tabulated())
      ahead_.start(key(next, allowed),
                   [this, next, slots = start_->slots, allowed, search]() mutable {
                     result r{build(next, std::move(slots), allowed), std::nullopt};
                     r.searched = r.built;
                     search(*r.searched);
                     return r;
                   });
    return {build(i, std::move(slots), allowed), std::nullopt};
  }

  //! Whether step i's run within `allowed` rounds is under way ahead, or done and not taken.
  [[nodiscard]] bool ahead_of(std::size_t i, std::size_t allowed) const noexcept {
    return ahead_.holds(key(i, allowed));
  }

  //! Whether `a`'s rounds repeat an earlier run's, recording them otherwise. The levelled
  //! variants often build the same rounds (small batches, where all run): the local search, a
  //! function of those rounds, would only repeat itself, to a plan that cannot win (an earlier
  //! one wins a tie).
  [[nodiscard]] bool repeats(const state& a, std::string_view name) {
    if (total_ <= 1)
      return false;
    std::vector<plan_microbatch> built = a.to_plan(name).microbatches;
    if (std::find(built_.begin(), built_.end(), built) != built_.end())
      return true;
    built_.push_back(std::move(built));
    return false;
  }

private:
  [[nodiscard]] std::size_t key(std::size_t i, std::size_t allowed) const noexcept {
    return i + steps_.size() * allowed;
  }

  //! Step i's construction from `slots` within `allowed` rounds: reads only what stays as it is
  //! while the steps run, so it may run ahead.
  [[nodiscard]] state build(std::size_t i, std::vector<levelled_slot> slots,
                            std::size_t allowed) const {
    const balanced_step& st = steps_[i];
    levelled_reach reach = st.reach;
    if ((i == first_ || st.dense) && dense_)
      reach.raise_area = tuning_.far_raise_area; // see `wide_raise_samples_per_rank`
    return levelled(costs_, std::move(slots), *start_, static_cast<std::int64_t>(allowed), reach,
                    tuning_);
  }

  const cost_rows<Estimator>& costs_;
  const sample_sizes& least_area_;
  const std::vector<balanced_step>& steps_;
  const balanced_tuning& tuning_;
  const bool dense_;
  const std::size_t first_;
  std::size_t left_ = 0;  // runs still to come
  std::size_t total_ = 0; // runs in all
  std::optional<levelled_start> start_;
  std::vector<std::vector<plan_microbatch>> built_; // the runs' rounds so far
  ahead<result> ahead_; // last: destroyed first, it waits for work that reads the rest
};

} // namespace dcpp::detail
