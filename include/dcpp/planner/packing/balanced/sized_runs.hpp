// The balanced portfolio's sized and tied runs (portfolio.hpp): each step's construction
// (balanced/sized.hpp), and, with `parallel_levelled`, the next tied step of the same list built
// and searched ahead on a second thread while one is searched in turn.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <future>
#include <optional>
#include <utility>
#include <vector>

#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/sized.hpp"
#include "dcpp/planner/packing/balanced/steps.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/util/ahead.hpp"

namespace dcpp::detail {

template <class Estimator>
class sized_runs {
public:
  using state = assignment<Estimator>;

  //! A run as built (none where its sizes are none), and searched by the portfolio's search
  //! where it ran ahead and was built.
  struct result {
    std::optional<state> built;
    std::optional<state> searched;
  };

  //! `k_min`: the fewest rounds that pack (the sized steps' start); `floor`: the step time at
  //! which a plan ends the portfolio (`balanced_run`'s floor); `dense`: the batch is dense
  //! (`balanced_tuning::dense`).
  sized_runs(const cost_rows<Estimator>& costs, const sample_sizes& least_area,
             const std::vector<balanced_step>& steps, std::int32_t k_min, double floor,
             const balanced_tuning& tuning, bool dense)
      : costs_(costs), least_area_(least_area), steps_(steps), k_min_(k_min), floor_(floor),
        tuning_(tuning), dense_(dense) {}

  //! Step i's run within `allowed` rounds: taken where it ran ahead with that allowance, built
  //! here otherwise. Where it is built here, step `next` (the number of steps: none) is built
  //! ahead meanwhile with the same allowance, with the switch and where the cost table holds
  //! every entry (the estimator is never called from the second thread); it is also searched
  //! there by `search(state&)`, the portfolio's own search, which must read only what stays as
  //! it is while the steps run, once step i's run is known short of the floor (at it the steps
  //! end, and the portfolio would wait for a search it drops) and where within `limit(next,
  //! best)`, `best` the best plan's step time so far (that only falls until the step is taken:
  //! no search the portfolio uses is left out). The run taken from ahead starts none: one pair
  //! at a time, each on its own thread.
  template <class Search>
  [[nodiscard]] result run(std::size_t i, std::size_t allowed, std::size_t next, double best,
                           const Search& search) {
    if (then_open_ != nullptr && ahead_.holds(key(i, allowed)))
      then_open_->open(); // this thread may now wait: work at the gate runs meanwhile
    if (std::optional<result> r = ahead_.take(key(i, allowed)))
      return std::move(*r);
    std::promise<bool> search_next; // unset where building step i throws: the next one is not
    if (tuning_.parallel_levelled && next < steps_.size() && costs_.tabulated()) {
      const double within = limit(next, best);
      ahead_.start(key(next, allowed),
                   [this, next, allowed, within, search, go = search_next.get_future(),
                    then = then_open_]() mutable {
                     result r{build(next, allowed), std::nullopt};
                     if (r.built && go.get() && r.built->step_time() <= within) {
                       r.searched = r.built;
                       search(*r.searched);
                     }
                     if (then != nullptr)
                       then->open();
                     return r;
                   });
    }
    result in_turn{build(i, allowed), std::nullopt};
    search_next.set_value(!(in_turn.built && in_turn.built->step_time() <= floor_));
    return in_turn;
  }

  //! The step time up to which step j's run is searched, the best plan's being `best`: within
  //! its `keep_within`, and on dense batches its `dense_keep_within`.
  [[nodiscard]] double limit(std::size_t j, double best) const noexcept {
    const balanced_step& st = steps_[j];
    return (dense_ ? std::min(st.keep_within, st.dense_keep_within) : st.keep_within) * best;
  }

  //! `g` opens when a run started ahead from now on is done, or taken (whoever waits at it runs
  //! after the run ahead, or beside it while this thread waits for it, not beside both).
  void open_when_ahead_done(gate* g) noexcept { then_open_ = g; }

  //! Whether step i's run within `allowed` rounds is under way ahead, or done and not taken.
  [[nodiscard]] bool ahead_of(std::size_t i, std::size_t allowed) const noexcept {
    return ahead_.holds(key(i, allowed));
  }

private:
  [[nodiscard]] std::size_t key(std::size_t i, std::size_t allowed) const noexcept {
    return i + steps_.size() * allowed;
  }

  //! Step i's construction within `allowed` rounds: reads only what stays as it is while the
  //! steps run, so it may run ahead.
  [[nodiscard]] std::optional<state> build(std::size_t i, std::size_t allowed) const {
    return sized_step(costs_, least_area_, steps_[i], k_min_, static_cast<std::int64_t>(allowed),
                      tuning_);
  }

  const cost_rows<Estimator>& costs_;
  const sample_sizes& least_area_;
  const std::vector<balanced_step>& steps_;
  const std::int32_t k_min_;
  const double floor_;
  const balanced_tuning& tuning_;
  const bool dense_;
  gate* then_open_ = nullptr;
  ahead<result> ahead_; // last: destroyed first, it waits for work that reads the rest
};

} // namespace dcpp::detail
