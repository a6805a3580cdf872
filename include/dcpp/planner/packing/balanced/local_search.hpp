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

//! A group's key in both headroom indexes: minus the headroom, computed by one expression, so
//! that the two order groups alike bit for bit (the plans must not depend on the index).
[[nodiscard]] inline double headroom_key(double round_max, double load) noexcept {
  return -(round_max - load);
}

//! The local search's index of groups by headroom, per CP size: walked in ascending order of
//! (minus the headroom, group id), the headroom being how far a group's load is below its round's
//! maximum. `Groups` (an `assignment`) gives each group id's `round_of(id)` and
//! `group_at(id).load`, and each round's `max_load(round)`. Two forms with that same order:
//! `round_headroom_index` (the search's) and `heap_headroom_index` (its reference in the tests, or
//! the search's from `tuning.heap_index_groups` groups on). Each has `reset(sizes)`, `file(size,
//! id)` (files group id of the assignment under size index `size` at its current load, moving it
//! from where it was filed), `drop(id)` (unfiles it, if filed) and `walk(size, f)` (`f(entry)` in
//! order until it returns true, an entry being the pair (minus the headroom, id)).
//! `refiled_on_max`: whether a round whose maximum moved must have its groups filed again. A size's
//! sets or heap are made when a group is first filed under it: a world of many legal sizes
//! (contiguous, 2^20 ranks) does not pay for the sizes no group has.
//!
//! `round_headroom_index` files each group under its size and round by (load, id), which a
//! round's maximum does not change: where a maximum moves (most changes of the search), no group
//! is filed again. A walk merges the size's rounds by (minus the headroom, id), and keeps what it
//! merged until the next change: the walks between two changes (one per sample of the critical
//! group, size and kind of change) read the merged entries again. Within a round the headroom
//! falls as the load rises, but two loads may round to the same headroom: such a run is taken
//! whole and ordered by id, which is the order of the pairs.
template <class Groups>
class round_headroom_index {
public:
  using entry = std::pair<double, std::int32_t>;
  static constexpr bool refiled_on_max = false;

  explicit round_headroom_index(const Groups& a) : a_(a) {}

  void reset(std::size_t sizes) {
    sizes_.reset(sizes);
    filed_.clear();
    ++generation_;
  }
  void file(std::size_t size, std::int32_t id) {
    drop(id); // unfiles it, and sizes filed_ to hold id (written below)
    const auto round = static_cast<std::size_t>(a_.round_of(id));
    const double load = a_.group_at(id).load;
    std::vector<loads>& rounds = sizes_.make(size).rounds;
    while (rounds.size() <= round)
      rounds.emplace_back(node_allocator<entry>(arena_));
    rounds[round].emplace(load, id);
    filed_[static_cast<std::size_t>(id)] = filed{size, round, load};
    ++generation_;
  }
  void drop(std::int32_t id) {
    const auto u = static_cast<std::size_t>(id);
    if (u >= filed_.size())
      filed_.resize(u + 1, std::nullopt);
    if (const auto& at = filed_[u]) {
      sizes_.find(at->size)->rounds[at->round].erase({at->load, id});
      filed_[u].reset();
      ++generation_;
    }
  }
  template <class F>
  void walk(std::size_t size, F&& f) {
    by_size* b = sizes_.find(size);
    if (b == nullptr)
      return;
    if (b->generation != generation_)
      restart(*b);
    for (std::size_t k = 0;; ++k) {
      if (k == b->merged.size() && !extend(*b))
        return;
      if (f(b->merged[k]))
        return;
    }
  }

private:
  using loads = std::set<entry, std::less<entry>, node_allocator<entry>>;
  struct filed {
    std::size_t size;
    std::size_t round;
    double load;
  };
  struct cursor {
    typename loads::const_iterator at, end; // the round's groups not yet in a run
    double max = 0;                         // the round's maximum
    std::vector<entry> run;                 // the current run: (minus the headroom, id), by id
    std::size_t next = 0;                   // its next entry
  };
  struct by_size {
    std::vector<loads> rounds;    // per round: (load, id)
    std::uint64_t generation = 0; // of the index when the merge below began
    std::vector<cursor> cursors;  // the first `live` are the merge's, one per round
    std::size_t live = 0;
    std::vector<entry> merged; // the entries merged so far, in walk order
  };

  //! The cursor's next run of groups of equal headroom, by id (none at the round's end).
  static void next_run(cursor& c) {
    c.run.clear();
    c.next = 0;
    if (c.at == c.end)
      return;
    const double key = headroom_key(c.max, c.at->first);
    for (; c.at != c.end && headroom_key(c.max, c.at->first) == key; ++c.at)
      c.run.emplace_back(key, c.at->second);
    if (c.run.size() > 1)
      std::sort(c.run.begin(), c.run.end());
  }
  void restart(by_size& b) {
    b.generation = generation_;
    b.merged.clear();
    b.live = 0;
    for (std::size_t r = 0; r < b.rounds.size(); ++r) {
      if (b.rounds[r].empty())
        continue;
      if (b.live == b.cursors.size())
        b.cursors.emplace_back();
      cursor& c = b.cursors[b.live++];
      c.at = b.rounds[r].begin();
      c.end = b.rounds[r].end();
      c.max = a_.max_load(static_cast<std::int32_t>(r));
      next_run(c);
    }
  }
  //! Merges one more entry (false: none is left).
  static bool extend(by_size& b) {
    cursor* least = nullptr;
    for (std::size_t k = 0; k < b.live; ++k) {
      cursor& c = b.cursors[k];
      if (c.next < c.run.size() && (least == nullptr || c.run[c.next] < least->run[least->next]))
        least = &c;
    }
    if (least == nullptr)
      return false;
    b.merged.push_back(least->run[least->next]);
    if (++least->next == least->run.size())
      next_run(*least);
    return true;
  }

  const Groups& a_;
  // one node per entry, from an arena that lives as long as the index (no malloc per update)
  node_arena arena_;
  per_size<by_size> sizes_;
  std::vector<std::optional<filed>> filed_;
  std::uint64_t generation_ = 1; // changes with every file and drop
};

template <class Groups>
class heap_headroom_index {
public:
  static constexpr bool refiled_on_max = true;

  explicit heap_headroom_index(const Groups& a) : a_(a) {}

  void reset(std::size_t sizes) {
    heaps_.reset(sizes);
    size_of_.clear();
  }
  void file(std::size_t size, std::int32_t id) {
    const double key = headroom_key(a_.max_load(a_.round_of(id)), a_.group_at(id).load);
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
  const Groups& a_;
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

  //! (Re)files group id under its current load, or drops it once it has closed.
  template <class Index>
  void refile(std::int32_t id, Index& index) {
    if (a_.open_group(id))
      index.file(costs_.size_index(a_.group_at(id).cp), id);
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
      if (Index::refiled_on_max && a_.max_load(rounds[i]) != old_max[i])
        a_.for_each_group(rounds[i], [&](std::int32_t id) { refile(id, index); });
    }
  }

  assignment<Estimator>& a_;
  const cost_rows<Estimator>& costs_;
  const balanced_tuning& tuning_;
  std::int32_t candidates_;
  double eps_ = 0;
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
