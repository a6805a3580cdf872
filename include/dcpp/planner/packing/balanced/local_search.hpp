// The local search every balanced construction's result goes through: the slowest group of a
// round gives a sample away, or swaps one with another round, while that lowers the step time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/util/indexed_heap.hpp"
#include "dcpp/planner/util/node_pool.hpp"

namespace dcpp::detail {

//! The local search's index of groups by headroom, per CP size: (minus the headroom, group id)
//! pairs, walked in ascending order. Two forms with that same order: `set_headroom_index`, whose
//! walks are cheap (the wide searches of small batches walk up to hundreds of entries per step),
//! and `heap_headroom_index`, whose updates are (where a round's maximum moves, each of its
//! groups is filed again: up to a thousand on 1,024 ranks). Each has `reset(sizes)`,
//! `file(size, id, key)` (files the group under size index `size`, moving it from where it was
//! filed), `drop(id)` (unfiles it, if filed) and `walk(size, f)` (`f(entry)` in order until it
//! returns true). A size's set or heap is made when a group is first filed under it: a world
//! of many legal sizes (contiguous, 2^20 ranks) does not pay for the sizes no group has.
class set_headroom_index {
public:
  void reset(std::size_t sizes) {
    sets_.reset(sizes);
    filed_.clear();
  }
  void file(std::size_t size, std::int32_t id, double key) {
    drop(id); // unfiles it, and sizes filed_ to hold id (written below)
    sets_.make(size, node_allocator<keyed>(arena_)).emplace(key, id);
    filed_[static_cast<std::size_t>(id)] = std::pair(size, key);
  }
  void drop(std::int32_t id) {
    const auto u = static_cast<std::size_t>(id);
    if (u >= filed_.size())
      filed_.resize(u + 1, std::nullopt);
    if (const auto& at = filed_[u]) {
      sets_.find(at->first)->erase({at->second, id});
      filed_[u].reset();
    }
  }
  template <class F>
  void walk(std::size_t size, F&& f) const {
    if (const auto* set = sets_.find(size))
      for (const keyed& e : *set)
        if (f(e))
          return;
  }

private:
  using keyed = std::pair<double, std::int32_t>;
  // one node per entry, from an arena that lives as long as the index (no malloc per update)
  node_arena arena_;
  per_size<std::set<keyed, std::less<keyed>, node_allocator<keyed>>> sets_;
  std::vector<std::optional<std::pair<std::size_t, double>>> filed_; // per id: (size, key)
};

class heap_headroom_index {
public:
  void reset(std::size_t sizes) {
    heaps_.reset(sizes);
    size_of_.clear();
  }
  void file(std::size_t size, std::int32_t id, double key) {
    const auto u = static_cast<std::size_t>(id);
    if (u >= size_of_.size())
      size_of_.resize(u + 1, none);
    if (size_of_[u] != size && size_of_[u] != none)
      heaps_.find(size_of_[u])->erase(id);
    heaps_.make(size).set(key, id); // files it, or moves it to its new key
    size_of_[u] = size;
  }
  void drop(std::int32_t id) {
    const auto u = static_cast<std::size_t>(id);
    if (u < size_of_.size() && size_of_[u] != none) {
      heaps_.find(size_of_[u])->erase(id);
      size_of_[u] = none;
    }
  }
  template <class F>
  void walk(std::size_t size, F&& f) {
    if (auto* heap = heaps_.find(size))
      heap->visit(std::numeric_limits<std::int32_t>::max(), f);
  }

private:
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  per_size<indexed_heap<double>> heaps_;
  std::vector<std::size_t> size_of_; // per id: the size index it is filed under, or `none`
};

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
  //! (the same plans either way).
  void run() {
    if (a_.group_ids() >= tuning_.heap_index_groups)
      run_with(heaps_);
    else
      run_with(sets_);
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

  [[nodiscard]] double headroom(std::int32_t id) const {
    return a_.max_load(a_.round_of(id)) - a_.group_at(id).load;
  }
  //! (Re)files group id under its current headroom, or drops it once it has closed.
  template <class Index>
  void refile(std::int32_t id, Index& index) {
    if (a_.open_group(id))
      index.file(costs_.size_index(a_.group_at(id).cp), id, -headroom(id));
    else
      index.drop(id);
  }
  template <class Index>
  void index_headroom(Index& index) {
    index.reset(costs_.sizes());
    for (std::int32_t id = 0; id < a_.group_ids(); ++id)
      refile(id, index);
  }

  //! The step-time change when round `other` gets a group of load `load`.
  [[nodiscard]] double rise(std::int32_t other, double load) const {
    return std::max(0.0, load - a_.max_load(other));
  }

  template <class Index>
  bool improve_round(std::int32_t m, Index& index) {
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
      // first), and one of that group's samples that may use g's size comes back
      const std::int64_t ts = costs_.tokens(s, g.cp);
      for (const std::int32_t c2 : ladder(pr, s)) {
        const double ws2 = c2 == g.cp ? w : costs_.cost(s, c2);
        const std::int64_t ts2 = costs_.tokens(s, c2);
        std::int32_t tries = 0;
        std::int64_t examined = 0; // samples of other groups looked at for this (s, size)
        index.walk(costs_.size_index(c2), [&](const auto& e) {
          const std::int32_t id = e.second;
          if (++tries > candidates_ || examined >= tuning_.swap_samples)
            return true;
          const auto& h = a_.group_at(id);
          const std::int32_t hm = a_.round_of(id);
          if (id == gid || hm == m)
            return false;
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
          return false;
        });
      }
    }
    if (best.sample < 0)
      return false;
    apply(gid, best, index);
    return true;
  }

  template <class Index>
  void apply(std::int32_t from, const change& c, Index& index) {
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
    refile(from, index);
    refile(to, index);
    // a round whose maximum moved changes every group's headroom
    const std::int32_t rounds[2] = {from_round, to_round};
    for (int i = 0; i < 2; ++i) {
      if (i == 1 && to_round == from_round)
        break;
      if (a_.max_load(rounds[i]) != old_max[i])
        a_.for_each_group(rounds[i], [&](std::int32_t id) { refile(id, index); });
    }
  }

  assignment<Estimator>& a_;
  const cost_rows<Estimator>& costs_;
  const balanced_tuning& tuning_;
  std::int32_t candidates_;
  double eps_ = 0;
  set_headroom_index sets_; // the headroom index: one of the two, chosen by `run`
  heap_headroom_index heaps_;
};

//! Runs the local search on `a` (see `local_search`).
template <class Estimator>
void improve(assignment<Estimator>& a, const balanced_tuning& tuning, std::int32_t candidates) {
  local_search<Estimator>(a, tuning, candidates).run();
}

} // namespace dcpp::detail
