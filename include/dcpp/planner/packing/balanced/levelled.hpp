// The levelled construction: rounds built one after another from the samples sorted by work per
// token, each round filled to the token budget, longest processing time first, onto its groups.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/levelled_inputs.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/util/indexed_heap.hpp"
#include "dcpp/planner/util/sort.hpp"

namespace dcpp::detail {

//! The levelled construction's run: the samples not placed yet, the rounds so far, and per CP
//! size the open groups of the round being built. See `levelled`.
template <class Estimator>
class levelled_builder {
public:
  levelled_builder(const cost_rows<Estimator>& costs, std::vector<levelled_slot> slots,
                   const levelled_start& start, std::int64_t rounds_allowed,
                   const levelled_reach& reach, const balanced_tuning& tuning)
      : costs_(costs), o_(costs.options()), pr_(costs.batch()), reach_(reach), tuning_(tuning),
        world_(costs.world()), budget_(costs.budget()), max_cp_(o_.effective_max_cp()),
        raise_area_(reach.raise_area > 0 ? reach.raise_area : tuning.raise_area),
        min_tokens_(start.min_tokens),
        spare_tokens_(rounds_allowed * world_ * budget_ - start.rank_tokens),
        slots_(std::move(slots)), remaining_(slots_.size()), room_(costs.sizes(), -1), mb_(world_) {
    std::iota(remaining_.begin(), remaining_.end(), 0);
    heaps_.reset(costs.sizes());
    mark_alike_rows();
  }

  [[nodiscard]] assignment<Estimator> build() {
    while (!remaining_.empty()) {
      build_round();
      rounds_.push_back(std::move(mb_));
      remaining_.swap(deferred_);
    }
    sample_sizes chosen;
    chosen.cp.resize(slots_.size());
    chosen.cost.resize(slots_.size());
    for (const levelled_slot& x : slots_) {
      chosen.cp[static_cast<std::size_t>(x.id)] = x.cp;
      chosen.cost[static_cast<std::size_t>(x.id)] = x.cost;
    }
    if (rounds_.size() % static_cast<std::size_t>(o_.microbatch_multiple) != 0) {
      std::size_t groups = 0;
      for (const microbatch_state& mb : rounds_)
        groups += mb.groups().size();
      if (static_cast<double>(slots_.size()) >=
          tuning_.halve_samples_per_group * static_cast<double>(groups))
        levelled_detail::halve_to_multiple(rounds_, costs_);
      else
        split_to_multiple(rounds_, o_.microbatch_multiple, costs_.batch(), costs_.estimator(),
                          /*grow=*/false);
    }
    return assignment<Estimator>::from_rounds(costs_, std::move(rounds_), std::move(chosen));
  }

private:
  // Per CP size with a group: (load, group of the round) and (tokens, group); a group's tokens
  // stay within the budget (below 2^37) and its index within the world (below 2^26), so a
  // (tokens, group) entry packs into 64 bits. Made when the first group of the size opens
  // (`per_size`), so a world of many legal sizes does not pay for all of them (a contiguous
  // world of 2^24 ranks has 2^24 sizes).
  static constexpr int token_bits = 38;
  static_assert(max_tokens_per_rank_limit < std::int64_t{1} << (token_bits - 1) &&
                max_world_size <= std::int64_t{1} << (64 - token_bits));
  struct size_heaps {
    indexed_heap<double> by_load;
    indexed_heap<std::int64_t, token_bits> by_tokens;
  };

  [[nodiscard]] double cost_at(const levelled_slot& x, std::int32_t c) const {
    return costs_.row_cost(x.row, c);
  }
  [[nodiscard]] std::int64_t tokens_at(const levelled_slot& x, std::int32_t c) const {
    return tokens_per_rank(o_, x.length, c);
  }
  [[nodiscard]] std::int64_t tokens_of(std::int32_t group) const {
    return mb_.groups()[static_cast<std::size_t>(group)].tokens;
  }

  //! The largest size x's search looks at from size c (cached in the slot).
  std::int32_t reach_of(levelled_slot& x, std::int32_t c) {
    if (x.reach_from != c) {
      const double area = x.cost * c;
      std::int32_t r = c;
      for (const std::int32_t c2 : ladder_between(pr_, std::int64_t{c} * 2, max_cp_)) {
        if (cost_at(x, c2) * c2 > reach_.area * area)
          break;
        r = c2;
      }
      x.reach_from = c;
      x.reach = r;
    }
    return x.reach;
  }

  //! A quick, exact "no" for a sample that fits no group of the round (most visits of a full
  //! round): whether a group has token room for x at its size or a larger one of its search
  //! (the doublings from x.cp are its ladder's sizes from there on). `room_`: per CP size the
  //! most token room of any group (-1: none; rooms only shrink in a round; a size's heaps hold
  //! an entry exactly when its room is >= 0).
  bool fits_somewhere(levelled_slot& x) {
    for (const std::int32_t c2 : ladder_between(pr_, x.cp, reach_of(x, x.cp)))
      if (room_[costs_.size_index(c2)] >= (c2 == x.cp ? x.tokens : tokens_at(x, c2)))
        return true;
    return false;
  }

  //! Runs of identical misses. The samples of a cost row lie side by side in `slots_` and are
  //! alike (length, size, cost) until one is raised or joins a larger group; while every
  //! unplaced sample of a row still has the row's start size, a miss of one is a miss of all the
  //! row's samples after it in the round (a miss changes nothing the next one looks at), so
  //! they are deferred together: the rounds are the same as one by one, without visiting each.
  //! Per row: where its samples end in `slots_`, its start size (0: the row's samples are not
  //! side by side or not alike, never skipped), and how many of its unplaced samples are at
  //! another size.
  void mark_alike_rows() {
    row_begin_.assign(costs_.rows(), 0);
    row_end_.assign(costs_.rows(), -1);
    row_cp_.assign(costs_.rows(), 0);
    off_start_.assign(costs_.rows(), 0);
    for (std::size_t p = 0; p < slots_.size(); ++p) {
      const levelled_slot& x = slots_[p];
      const auto r = static_cast<std::size_t>(x.row);
      if (row_end_[r] < 0) {
        row_begin_[r] = static_cast<std::int32_t>(p);
        row_cp_[r] = x.cp;
      } else if (row_end_[r] != static_cast<std::int32_t>(p) || x.cp != row_cp_[r] ||
                 x.cost != slots_[p - 1].cost || x.tokens != slots_[p - 1].tokens ||
                 x.length != slots_[p - 1].length || x.min_cp != slots_[p - 1].min_cp) {
        row_cp_[r] = 0;
      }
      row_end_[r] = static_cast<std::int32_t>(p) + 1;
    }
  }

  //! Every unplaced sample of x's row is alike x.
  [[nodiscard]] bool alike(const levelled_slot& x) const {
    const auto r = static_cast<std::size_t>(x.row);
    return reach_.skip_alike && row_cp_[r] != 0 && x.cp == row_cp_[r] && off_start_[r] == 0;
  }

  //! The round's level: what a rank full of tokens costs at the token-weighted mean work per
  //! token of the samples that would fill this round.
  [[nodiscard]] double round_level() const {
    const std::int64_t capacity = std::int64_t{world_} * budget_;
    std::int64_t filled = 0;
    double work = 0;
    for (std::size_t k = 0; k < remaining_.size() && filled < capacity; ++k) {
      const levelled_slot& x = slots_[static_cast<std::size_t>(remaining_[k])];
      const std::int64_t t = x.tokens * x.cp;
      filled += t;
      work += x.per_token * static_cast<double>(t);
    }
    return work / static_cast<double>(filled) * static_cast<double>(budget_);
  }

  [[nodiscard]] bool room_left() const {
    for (const std::size_t l : heaps_.made_sizes())
      if (const std::int64_t r = room_[l]; r >= 0 && r >= min_tokens_)
        return true;
    return false;
  }

  //! A round without free ranks whose groups have room only for samples that cannot reach them
  //! (too small for a large group's area limit) would otherwise be scanned to the end for
  //! nothing. After a long run of misses the rest is checked from its end, where the smallest
  //! samples are: the round ends when no sample from position i on is due a raise and none fits
  //! a group at a size its search includes, i.e. when a full scan would defer exactly those
  //! samples and change nothing else. The check stops at the first sample that may fit.
  bool exhausted(std::size_t i, std::int32_t run) {
    const std::size_t rest = remaining_.size() - i;
    const auto fraction = static_cast<std::size_t>(tuning_.early_end_fraction);
    if (!reach_.end_rounds_early || run < tuning_.early_end_misses ||
        static_cast<std::size_t>(run) * fraction < rest || i < next_check_)
      return false;
    next_check_ = i + rest / fraction;
    const double level = std::max(level_cost_, round_max_);
    for (std::size_t j = remaining_.size(); j-- > i;) {
      levelled_slot& x = slots_[static_cast<std::size_t>(remaining_[j])];
      if (x.cost > level || fits_somewhere(x))
        return false;
      if (alike(x)) // the row's samples before it answer the same
        j = static_cast<std::size_t>(
            std::lower_bound(remaining_.begin() + static_cast<std::ptrdiff_t>(i),
                             remaining_.begin() + static_cast<std::ptrdiff_t>(j),
                             row_begin_[static_cast<std::size_t>(x.row)]) -
            remaining_.begin());
    }
    return true;
  }

  //! A full round: no free ranks and no group with room for the smallest sample (checked every
  //! `full_round_check_every` misses, at the top of position i).
  bool round_full(std::size_t i) {
    return misses_ > 0 && misses_ % tuning_.full_round_check_every == 0 && mb_.free_ranks() == 0 &&
           (!room_left() || exhausted(i, misses_));
  }

  void defer_rest(std::size_t i) {
    deferred_.insert(deferred_.end(), remaining_.begin() + static_cast<std::ptrdiff_t>(i),
                     remaining_.end());
  }

  //! The least-loaded group with token room for x (among the first few by load, else the one
  //! with the most room), of x's size `c` or of a larger one within the reach (up to x.reach,
  //! which fits_somewhere has worked out): (group, size), group -1 where none.
  std::pair<std::int32_t, std::int32_t> least_loaded_group(const levelled_slot& x, std::int32_t c) {
    std::int32_t chosen = -1;
    std::int32_t chosen_cp = c;
    double best = std::numeric_limits<double>::infinity();
    for (const std::int32_t c2 : ladder_between(pr_, c, x.reach)) {
      const double w2 = c2 == c ? x.cost : cost_at(x, c2);
      const std::int64_t t2 = c2 == c ? x.tokens : tokens_at(x, c2);
      const std::size_t l = costs_.size_index(c2);
      if (room_[l] < t2)
        continue; // no group of this size has the token room (or none is open)
      size_heaps& h = *heaps_.find(l);
      std::int32_t found = h.by_tokens.top()->second; // the roomiest
      h.by_load.visit(tuning_.candidates_per_size, [&](const auto& e) {
        if (tokens_of(e.second) + t2 > budget_)
          return false;
        found = e.second;
        return true;
      });
      const double load = mb_.groups()[static_cast<std::size_t>(found)].load + w2;
      if (load < best) {
        best = load;
        chosen = found;
        chosen_cp = c2;
      }
    }
    return {chosen, chosen_cp};
  }

  //! A larger group than x's size `c` with slack up to the round's maximum and token room:
  //! (group, size), group -1 where none.
  std::pair<std::int32_t, std::int32_t> free_ride(const levelled_slot& x, std::int32_t c) {
    std::int32_t chosen = -1;
    for (const std::int32_t c2 : ladder_between(pr_, std::int64_t{c} * 2, max_cp_)) {
      const std::size_t l = costs_.size_index(c2);
      if (room_[l] < 0)
        continue; // no group of this size is open
      size_heaps& h = *heaps_.find(l);
      const double w2 = cost_at(x, c2);
      if (w2 * c2 > tuning_.ride_area * x.cost * x.cp)
        break; // larger sizes cost more area still
      const std::int64_t t2 = tokens_at(x, c2);
      if (h.by_load.top()->first + w2 > round_max_ || room_[l] < t2)
        continue; // no group of this size has the slack, or none the token room
      h.by_load.visit(tuning_.candidates_per_size, [&](const auto& e) {
        if (e.first + w2 > round_max_)
          return true; // the rest are loaded more
        if (tokens_of(e.second) + t2 > budget_)
          return false;
        chosen = e.second;
        return true;
      });
      if (chosen >= 0)
        return {chosen, c2};
    }
    return {-1, c};
  }

  //! x at position i fits no group: deferred, and where the rest of its row misses too, that
  //! rest at once, with the full-round checks a scan one by one would make on the way (`i` then
  //! moves to the row's last). True where the round is full.
  bool miss(std::size_t& i, const levelled_slot& x) {
    ++misses_;
    deferred_.push_back(remaining_[i]);
    if (!alike(x))
      return false;
    const auto r = static_cast<std::size_t>(x.row);
    const auto first = remaining_.begin() + static_cast<std::ptrdiff_t>(i) + 1;
    if (first == remaining_.end() || *first >= row_end_[r])
      return false; // x was its row's last unplaced sample: none to defer with it
    // The row's samples lie side by side in `remaining_` (ascending positions in `slots_`):
    // steps doubling from `first` bracket their end, a binary search finds it (a run of n costs
    // about 2 log2 n reads, not log2 of all)
    auto lo = first + 1;
    auto hi = remaining_.end();
    for (std::ptrdiff_t step = 1; step < hi - lo; step *= 2) {
      const auto probe = lo + (step - 1);
      if (*probe >= row_end_[r]) {
        hi = probe;
        break;
      }
      lo = probe + 1;
    }
    const auto last = std::lower_bound(lo, hi, row_end_[r]);
    const auto end = i + 1 + static_cast<std::size_t>(last - first);
    const std::int32_t every = tuning_.full_round_check_every;
    bool full = false;
    // positions i+1.. start with misses, misses+1, ...; the checks fall where that count is a
    // multiple of `every` (the ranks and rooms they look at stay as they are)
    const std::int32_t since_check = misses_ % every;
    std::size_t p = i + 1 + static_cast<std::size_t>(since_check == 0 ? 0 : every - since_check);
    const std::int32_t base = misses_ - static_cast<std::int32_t>(i + 1);
    if (p < end && mb_.free_ranks() == 0) {
      full = !room_left();
      for (; !full && p < end; p += static_cast<std::size_t>(every))
        full = exhausted(p, base + static_cast<std::int32_t>(p));
    }
    if (full) {
      defer_rest(i + 1);
      return true;
    }
    deferred_.insert(deferred_.end(), first, last);
    misses_ = base + static_cast<std::int32_t>(end);
    i = end - 1;
    return false;
  }

  //! x joins group `chosen` of size `chosen_cp`.
  void place(levelled_slot& x, std::int32_t chosen, std::int32_t chosen_cp) {
    misses_ = 0;
    if (chosen_cp != x.cp) {
      x.cp = chosen_cp;
      x.cost = cost_at(x, chosen_cp);
      x.tokens = tokens_at(x, chosen_cp);
    }
    const std::size_t l = costs_.size_index(chosen_cp);
    auto& g = mb_.groups()[static_cast<std::size_t>(chosen)];
    mb_.add(chosen, x.id, x.tokens, x.cost);
    round_max_ = std::max(round_max_, g.load);
    size_heaps& h = heaps_.make(l);
    h.by_load.set(g.load, chosen);
    h.by_tokens.set(g.tokens, chosen);
    room_[l] = budget_ - h.by_tokens.top()->first;
  }

  //! One round from `remaining_`: each sample opens a group on free ranks while there are some,
  //! then joins a group, or waits in `deferred_` for the next round.
  void build_round() {
    mb_ = microbatch_state(world_);
    heaps_.each([&](std::size_t l, size_heaps& h) {
      h.by_load.clear();
      h.by_tokens.clear();
      room_[l] = -1;
    });
    deferred_.clear();
    level_cost_ = round_level();
    next_check_ = 0;
    misses_ = 0;
    round_max_ = 0;
    for (std::size_t i = 0; i < remaining_.size(); ++i) {
      if (round_full(i)) {
        defer_rest(i);
        return;
      }
      levelled_slot& x = slots_[static_cast<std::size_t>(remaining_[i])];
      const double level = std::max(level_cost_, round_max_);
      const std::int32_t start_cp = row_cp_[static_cast<std::size_t>(x.row)];
      const bool was_off = x.cp != start_cp;
      levelled_detail::raise_to_level(x, level, spare_tokens_, costs_, raise_area_);
      if (!was_off && x.cp != start_cp)
        ++off_start_[static_cast<std::size_t>(x.row)]; // raised: counted until placed
      const std::int32_t c = x.cp;
      std::pair<std::int32_t, std::int32_t> chosen{-1, c};
      if (const auto first = mb_.free_block(o_, c))
        chosen.first = mb_.open(*first, c);
      else if (!(reach_.heavy_share > 0 && x.cost > reach_.heavy_share * level) &&
               fits_somewhere(x))
        chosen = least_loaded_group(x, c);
      if (chosen.first < 0 && reach_.free_ride && mb_.free_ranks() == 0)
        chosen = free_ride(x, c);
      if (chosen.first < 0) {
        if (miss(i, x))
          return;
        continue;
      }
      if (start_cp != 0 && x.cp != start_cp)
        --off_start_[static_cast<std::size_t>(x.row)]; // placed: no longer counted
      place(x, chosen.first, chosen.second);
    }
  }

  const cost_rows<Estimator>& costs_;
  const plan_options& o_;
  const problem& pr_;
  const levelled_reach& reach_;
  const balanced_tuning& tuning_;
  const std::int32_t world_;
  const std::int64_t budget_;
  const std::int32_t max_cp_;
  const double raise_area_;
  const std::int64_t min_tokens_;
  std::int64_t spare_tokens_;
  std::vector<levelled_slot> slots_;
  std::vector<std::int32_t> remaining_; // positions in `slots_` of the samples not placed yet
  std::vector<std::int32_t> deferred_;  // ... of those the round being built leaves
  std::vector<microbatch_state> rounds_;
  per_size<size_heaps> heaps_;
  std::vector<std::int64_t> room_;
  std::vector<std::int32_t> row_begin_, row_end_, row_cp_, off_start_;
  // the round being built
  microbatch_state mb_;
  double level_cost_ = 0;
  std::size_t next_check_ = 0;
  std::int32_t misses_ = 0;
  double round_max_ = 0;
};

//! The levelled construction. Rounds one after another from `slots` (a copy of `start.slots`,
//! or those themselves): each sample opens a group on free ranks while there are some, then
//! joins the least-loaded group with token room of its CP size or of a larger one within the
//! reach, or waits for the next round. Samples above the round's level first spread over larger
//! groups (paid from the spare rank tokens of `rounds_allowed` rounds). The round count is then
//! raised to the micro-batch multiple by splitting rounds.
template <class Estimator>
[[nodiscard]] assignment<Estimator>
levelled(const cost_rows<Estimator>& costs, std::vector<levelled_slot> slots,
         const levelled_start& start, std::int64_t rounds_allowed, const levelled_reach& reach,
         const balanced_tuning& tuning) {
  return levelled_builder<Estimator>(costs, std::move(slots), start, rounds_allowed, reach, tuning)
      .build();
}

} // namespace dcpp::detail
