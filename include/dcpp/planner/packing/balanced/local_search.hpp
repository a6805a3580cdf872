// The local search every balanced construction's result goes through: the slowest group of a
// round gives a sample away, or swaps one with another round, while that lowers the step time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/headroom_index.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/util/indexed_heap.hpp"

namespace dcpp::detail {

//! Improves `a` in place: sweeps over the rounds; in each, the group with the largest load (the
//! round's critical group) gives one of its samples to the group with the most headroom (how
//! far its load is below its round's maximum) that has token room, or to a new group on free
//! ranks, at any size on the sample's ladder, or swaps it with a sample of a group in another
//! round; the change that lowers the step time most is made, while one does by more than
//! `tuning.gain_epsilon` of it. Never raises the step time; keeps every invariant of
//! `assignment`. `candidates`: groups examined per CP size for a move or a swap.
template <class Estimator>
class local_search {
public:
  local_search(assignment<Estimator>& a, const balanced_tuning& tuning, std::int32_t candidates)
      : a_(a), costs_(a.costs()), tuning_(tuning), candidates_(candidates) {}

  //! The search, with the headroom index as a heap from `tuning.heap_index_groups` groups on
  //! (the same plans either way), else as per-round sets.
  void run() {
    if (a_.group_ids() >= tuning_.heap_index_groups)
      run_with(heaps_);
    else
      run_with(rounds_);
  }

private:
  template <class Index>
  void run_with(Index& index) {
    index_headroom(index);
    double total = 0;
    for (std::int32_t m = 0; m < a_.rounds(); ++m)
      total += a_.max_load(m);
    eps_ = tuning_.gain_epsilon * std::max(total, 1e-300);
    // improve_round is a function of the state, which only a change alters: a round that found
    // nothing is not examined again until a change has been made somewhere
    std::uint64_t changes = 0;
    std::vector<std::uint64_t> idle_since(static_cast<std::size_t>(a_.rounds()), ~std::uint64_t{0});
    for (std::int32_t sweep = 0; sweep < tuning_.improvement_sweeps; ++sweep) {
      bool improved = false;
      for (std::int32_t m = 0; m < a_.rounds(); ++m) {
        auto& idle = idle_since[static_cast<std::size_t>(m)];
        if (idle == changes)
          continue;
        for (std::int32_t step = 0; step < tuning_.moves_per_rank * costs_.world(); ++step) {
          if (!improve_round(m, index)) {
            idle = changes;
            break;
          }
          improved = true;
          ++changes;
        }
      }
      if (!improved)
        break;
    }
  }

  struct change {
    double delta = 0; // change of the step time (negative: better)
    std::int32_t sample = -1;
    std::int32_t to_group = -1; // move into this group, or
    std::int32_t to_round = -1; // open a group in this round at to_first with to_cp
    std::int32_t to_first = 0;
    std::int32_t to_cp = 0;
    std::int32_t swap_with = -1; // swap: the sample of to_group that comes back
  };

  //! The least cost of a sample of open group id, at the group's size (kept until it changes).
  [[nodiscard]] double lightest(std::int32_t id) {
    const auto u = static_cast<std::size_t>(id);
    if (u >= lightest_.size())
      lightest_.resize(u + 1, -1.0);
    if (lightest_[u] < 0) {
      double least = std::numeric_limits<double>::infinity();
      for (const std::int32_t t : a_.group_at(id).samples)
        least = std::min(least, a_.cost_of(t));
      lightest_[u] = least;
    }
    return lightest_[u];
  }

  //! (Re)files group id under its current load, or drops it once it has closed; either way its
  //! lightest sample is found again when next asked for.
  template <class Index>
  void refile(std::int32_t id, Index& index) {
    if (static_cast<std::size_t>(id) < lightest_.size())
      lightest_[static_cast<std::size_t>(id)] = -1.0;
    indexed_heap<double>& loads = by_load_[static_cast<std::size_t>(a_.round_of(id))];
    if (a_.open_group(id)) {
      index.file(costs_.size_index(a_.group_at(id).cp), id);
      loads.set(-a_.group_at(id).load, a_.slot_of(id));
    } else {
      index.drop(id);
      loads.erase(a_.slot_of(id));
    }
  }
  template <class Index>
  void index_headroom(Index& index) {
    index.reset(costs_.sizes());
    by_load_.assign(static_cast<std::size_t>(a_.rounds()), {});
    for (std::int32_t id = 0; id < a_.group_ids(); ++id)
      refile(id, index);
  }

  //! The step-time change when round `other` gets a group of load `load`.
  [[nodiscard]] double rise(std::int32_t other, double load) const {
    return std::max(0.0, load - a_.max_load(other));
  }

  template <class Index>
  bool improve_round(std::int32_t m, Index& index) {
    // the critical group: the largest load, the first opened on a tie; `second`: the largest
    // load of the round's other groups (0: none)
    std::int32_t gid = -1;
    double second = 0;
    by_load_[static_cast<std::size_t>(m)].visit(2, [&](const auto& e) {
      if (gid >= 0) {
        second = -e.first;
        return true;
      }
      gid = a_.id_at(m, e.second);
      return false;
    });
    if (gid < 0)
      return false;
    const auto& g = a_.group_at(gid);
    const double max_m = g.load;
    if (max_m - second <= eps_)
      return false;
    const std::int64_t budget = costs_.budget();
    const problem& pr = costs_.batch();
    change best;
    best.delta = -eps_;
    for (const std::int32_t s : g.samples) {
      const double w = a_.cost_of(s);
      const double rest = std::max(second, g.load - w);
      if (max_m - rest + eps_ <= -best.delta)
        continue; // cannot beat the best found
      // moves: into the groups with the most headroom, or onto free ranks
      for (const std::int32_t c2 : ladder(pr, s)) {
        const double w2 = c2 == g.cp ? w : costs_.cost(s, c2);
        const std::int64_t t2 = costs_.tokens(s, c2);
        std::int32_t tries = 0;
        // most headroom first (true: stop)
        index.walk(costs_.size_index(c2), [&](const auto& e) {
          const auto& [neg_headroom, id] = e;
          if (rest - max_m + std::max(0.0, w2 + neg_headroom) >= best.delta)
            return true;
          if (id == gid)
            return false;
          const auto& h = a_.group_at(id);
          if (h.tokens + t2 > budget)
            return ++tries > candidates_;
          const std::int32_t hm = a_.round_of(id);
          const double delta =
              hm == m ? std::max(rest, h.load + w2) - max_m : rest - max_m + rise(hm, h.load + w2);
          if (delta < best.delta)
            best = change{delta, s, id, -1, 0, 0, -1};
          return true; // later entries have less headroom
        });
        a_.by_free_ranks([&](std::int32_t free, std::int32_t r) {
          if (free < c2)
            return true;
          const double delta = r == m ? std::max(rest, w2) - max_m : rest - max_m + rise(r, w2);
          if (delta < best.delta) {
            if (const auto first = a_.free_block(r, c2))
              best = change{delta, s, -1, r, *first, c2, -1};
          }
          return false;
        });
      }
      // swaps: s goes to a group of another round, of any size s may use (most headroom
      // first), and one of that group's samples that may use g's size comes back. No swap of s
      // changes the step time by less than `floor` (g keeps at least `rest`), and one at g's
      // own size by less than minus the other group's headroom (what s adds there is what the
      // returning sample takes from g): a walk stops where neither bound leaves a gain, and
      // reaches `swap_groups` groups at g's size (where the full gain lies deep in the
      // headroom order), `candidates_` at the others.
      const std::int64_t ts = costs_.tokens(s, g.cp);
      const double floor = rest - max_m;
      for (const std::int32_t c2 : ladder(pr, s)) {
        if (floor >= best.delta)
          break;
        const bool same_size = c2 == g.cp;
        const double ws2 = same_size ? w : costs_.cost(s, c2);
        const std::int64_t ts2 = costs_.tokens(s, c2);
        const std::int64_t reach =
            same_size ? std::max<std::int64_t>(candidates_, tuning_.swap_groups) : candidates_;
        std::int64_t tries = 0;
        std::int64_t examined = 0; // samples of other groups looked at for this (s, size)
        index.walk(costs_.size_index(c2), [&](const auto& e) {
          const auto& [neg_headroom, id] = e;
          if (floor >= best.delta || (same_size && neg_headroom >= best.delta))
            return true;
          if (++tries > reach || examined >= tuning_.swap_samples)
            return true;
          const std::int32_t hm = a_.round_of(id);
          if (id == gid || hm == m)
            return false;
          // at g's size, the lightest sample bounds what g can lose
          if (same_size && w - lightest(id) <= -best.delta)
            return false;
          const auto& h = a_.group_at(id);
          examined += static_cast<std::int64_t>(h.samples.size());
          for (const std::int32_t u : h.samples) {
            const auto uu = static_cast<std::size_t>(u);
            if (pr.min_cp_of[uu] > g.cp)
              continue;
            const double wu_g = same_size ? a_.cost_of(u) : costs_.cost(u, g.cp);
            const double g_new = g.load - w + wu_g;
            if (g_new >= g.load)
              continue;
            const double h_new = h.load - a_.cost_of(u) + ws2;
            const double delta = std::max(second, g_new) - max_m + rise(hm, h_new);
            if (delta >= best.delta)
              continue;
            if (g.tokens - ts + costs_.tokens(u, g.cp) > budget ||
                h.tokens - costs_.tokens(u, c2) + ts2 > budget)
              continue;
            best = change{delta, s, id, -1, 0, 0, u};
          }
          return false;
        });
      }
    }
    if (best.sample < 0)
      return false;
    apply(gid, best, second, index);
    return true;
  }

  //! Makes change `c` of critical group `from`, `second` being the largest load of its round's
  //! other groups.
  template <class Index>
  void apply(std::int32_t from, const change& c, double second, Index& index) {
    const std::int32_t from_round = a_.round_of(from);
    std::int32_t to = c.to_group;
    const std::int32_t to_round = to >= 0 ? a_.round_of(to) : c.to_round;
    const double old_max[2] = {a_.max_load(from_round), a_.max_load(to_round)};
    if (c.swap_with >= 0) {
      // both groups keep a sample: insert first so that neither closes on the way
      a_.insert(from, c.swap_with);
      a_.insert(to, c.sample);
      a_.remove(to, c.swap_with);
      a_.remove(from, c.sample, second); // to is in another round
    } else {
      if (to < 0)
        to = a_.open(c.to_round, c.to_first, c.to_cp);
      a_.remove(from, c.sample, second); // before to changes
      a_.insert(to, c.sample);
    }
    refile(from, index);
    refile(to, index);
    // a round whose maximum moved changes every group's headroom
    const std::int32_t rounds[2] = {from_round, to_round};
    for (int i = 0; i < 2; ++i) {
      if (i == 1 && to_round == from_round)
        break;
      if (Index::refiled_on_max && a_.max_load(rounds[i]) != old_max[i])
        a_.for_each_group(rounds[i], [&](std::int32_t id) { refile(id, index); });
    }
  }

  assignment<Estimator>& a_;
  const cost_rows<Estimator>& costs_;
  const balanced_tuning& tuning_;
  std::int32_t candidates_;
  double eps_ = 0;
  std::vector<double> lightest_; // per group id: `lightest(id)`, or -1 where not known
  // per round: its open groups by (minus the load, place in the round), which orders them as
  // (minus the load, id): the first is the round's critical group
  std::vector<indexed_heap<double>> by_load_;
  // the headroom index: one of the two, chosen by `run`
  round_headroom_index<assignment<Estimator>> rounds_{a_};
  heap_headroom_index<assignment<Estimator>> heaps_{a_};
};

//! Runs the local search on `a` (see `local_search`).
template <class Estimator>
void improve(assignment<Estimator>& a, const balanced_tuning& tuning, std::int32_t candidates) {
  local_search<Estimator>(a, tuning, candidates).run();
}

} // namespace dcpp::detail
