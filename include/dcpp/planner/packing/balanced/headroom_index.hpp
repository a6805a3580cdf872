// The local search's index of groups by headroom (how far a group's load is below its round's
// maximum), per CP size: the order its moves and swaps walk the groups in.
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

#include "dcpp/planner/util/indexed_heap.hpp"
#include "dcpp/planner/util/node_pool.hpp"
#include "dcpp/planner/util/per_size.hpp"

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

} // namespace dcpp::detail
