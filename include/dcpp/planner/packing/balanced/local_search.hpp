// The local search every balanced construction's result goes through: the slowest group of a
// round gives a sample away, or swaps one with another round, while that lowers the step time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "dcpp/planner/node_pool.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"

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

  void run() {
    index_headroom();
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
          if (!improve_round(m)) {
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

private:
  using keyed = std::pair<double, std::int32_t>; // (-headroom, group id)
  using keyed_set = std::set<keyed, std::less<keyed>, node_allocator<keyed>>;

  struct change {
    double delta = 0; // change of the step time (negative: better)
    std::int32_t sample = -1;
    std::int32_t to_group = -1; // move into this group, or
    std::int32_t to_round = -1; // open a group in this round at to_first with to_cp
    std::int32_t to_first = 0;
    std::int32_t to_cp = 0;
    std::int32_t swap_with = -1; // swap: the sample of to_group that comes back
  };

  [[nodiscard]] double headroom(std::int32_t id) const {
    return a_.max_load(a_.round_of(id)) - a_.group_at(id).load;
  }
  //! (Re)files group id under its current headroom, or drops it once it has closed.
  void refile(std::int32_t id) {
    const auto u = static_cast<std::size_t>(id);
    if (u >= key_.size()) {
      key_.resize(u + 1, 0.0);
      size_of_.resize(u + 1, 0);
      filed_.resize(u + 1, 0);
    }
    if (filed_[u] != 0)
      by_headroom_[size_of_[u]].erase({key_[u], id});
    filed_[u] = 0;
    if (!a_.open_group(id))
      return;
    size_of_[u] = costs_.size_index(a_.group_at(id).cp);
    key_[u] = -headroom(id);
    by_headroom_[size_of_[u]].emplace(key_[u], id);
    filed_[u] = 1;
  }
  void index_headroom() {
    by_headroom_.clear();
    for (std::size_t l = 0; l < costs_.sizes(); ++l)
      by_headroom_.emplace_back(node_allocator<keyed>(arena_));
    for (std::int32_t id = 0; id < a_.group_ids(); ++id)
      refile(id);
  }

  //! The step-time change when round `other` gets a group of load `load`.
  [[nodiscard]] double rise(std::int32_t other, double load) const {
    return std::max(0.0, load - a_.max_load(other));
  }

  bool improve_round(std::int32_t m) {
    std::int32_t gid = -1;
    double second = 0;
    a_.for_each_group(m, [&](std::int32_t id) {
      const double l = a_.group_at(id).load;
      if (gid < 0 || l > a_.group_at(gid).load) {
        if (gid >= 0)
          second = std::max(second, a_.group_at(gid).load);
        gid = id;
      } else {
        second = std::max(second, l);
      }
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
        for (const auto& [neg_headroom, id] : by_headroom_[costs_.size_index(c2)]) {
          if (rest - max_m + std::max(0.0, w2 + neg_headroom) >= best.delta)
            break;
          if (id == gid)
            continue;
          const auto& h = a_.group_at(id);
          if (h.tokens + t2 > budget) {
            if (++tries > candidates_)
              break;
            continue;
          }
          const std::int32_t hm = a_.round_of(id);
          const double delta =
              hm == m ? std::max(rest, h.load + w2) - max_m : rest - max_m + rise(hm, h.load + w2);
          if (delta < best.delta)
            best = change{delta, s, id, -1, 0, 0, -1};
          break; // later entries have less headroom
        }
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
      // first), and one of that group's samples that may use g's size comes back
      const std::int64_t ts = costs_.tokens(s, g.cp);
      for (const std::int32_t c2 : ladder(pr, s)) {
        const double ws2 = c2 == g.cp ? w : costs_.cost(s, c2);
        const std::int64_t ts2 = costs_.tokens(s, c2);
        std::int32_t tries = 0;
        std::int64_t examined = 0; // samples of other groups looked at for this (s, size)
        for (const auto& [neg_headroom, id] : by_headroom_[costs_.size_index(c2)]) {
          if (++tries > candidates_ || examined >= tuning_.swap_samples)
            break;
          const auto& h = a_.group_at(id);
          const std::int32_t hm = a_.round_of(id);
          if (id == gid || hm == m)
            continue;
          examined += static_cast<std::int64_t>(h.samples.size());
          for (const std::int32_t u : h.samples) {
            const auto uu = static_cast<std::size_t>(u);
            if (pr.min_cp_of[uu] > g.cp)
              continue;
            const double wu_g = c2 == g.cp ? a_.cost_of(u) : costs_.cost(u, g.cp);
            const double g_new = g.load - w + wu_g;
            if (g_new >= g.load)
              continue;
            if (g.tokens - ts + costs_.tokens(u, g.cp) > budget ||
                h.tokens - costs_.tokens(u, c2) + ts2 > budget)
              continue;
            const double h_new = h.load - a_.cost_of(u) + ws2;
            const double delta = std::max(second, g_new) - max_m + rise(hm, h_new);
            if (delta < best.delta)
              best = change{delta, s, id, -1, 0, 0, u};
          }
        }
      }
    }
    if (best.sample < 0)
      return false;
    apply(gid, best);
    return true;
  }

  void apply(std::int32_t from, const change& c) {
    const std::int32_t from_round = a_.round_of(from);
    std::int32_t to = c.to_group;
    const std::int32_t to_round = to >= 0 ? a_.round_of(to) : c.to_round;
    const double old_max[2] = {a_.max_load(from_round), a_.max_load(to_round)};
    if (c.swap_with >= 0) {
      // both groups keep a sample: insert first so that neither closes on the way
      a_.insert(from, c.swap_with);
      a_.insert(to, c.sample);
      a_.remove(to, c.swap_with);
      a_.remove(from, c.sample);
    } else {
      if (to < 0)
        to = a_.open(c.to_round, c.to_first, c.to_cp);
      a_.remove(from, c.sample);
      a_.insert(to, c.sample);
    }
    refile(from);
    refile(to);
    // a round whose maximum moved changes every group's headroom
    const std::int32_t rounds[2] = {from_round, to_round};
    for (int i = 0; i < 2; ++i) {
      if (i == 1 && to_round == from_round)
        break;
      if (a_.max_load(rounds[i]) != old_max[i])
        a_.for_each_group(rounds[i], [&](std::int32_t id) { refile(id); });
    }
  }

  assignment<Estimator>& a_;
  const cost_rows<Estimator>& costs_;
  const balanced_tuning& tuning_;
  std::int32_t candidates_;
  double eps_ = 0;
  // The index allocates one node per entry and changes with every move: its nodes come from an
  // arena that lives as long as the search (no malloc/free per update).
  node_arena arena_;
  std::vector<keyed_set> by_headroom_; // per CP size: (-headroom, group id)
  std::vector<double> key_;            // per group id: its key while filed
  std::vector<std::size_t> size_of_;   // per group id: its size's index while filed
  std::vector<char> filed_;
};

//! Runs the local search on `a` (see `local_search`).
template <class Estimator>
void improve(assignment<Estimator>& a, const balanced_tuning& tuning, std::int32_t candidates) {
  local_search<Estimator>(a, tuning, candidates).run();
}

} // namespace dcpp::detail
