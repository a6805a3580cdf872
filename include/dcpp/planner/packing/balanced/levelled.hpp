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
#include "dcpp/planner/indexed_heap.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/sort.hpp"

namespace dcpp::detail {

//! One sample as the levelled construction sees it, stored in the order it visits them
//! (descending work per token): a round's scan reads these one after another instead of
//! fetching each sample's fields from arrays indexed by sample id, its costliest reads (see
//! docs/benchmarks.md, "balanced: how the numbers were chosen").
struct levelled_slot {
  double cost = 0;      // at `cp`
  double per_token = 0; // work per rank token at the least-area size
  std::int64_t length = 0;
  std::int64_t tokens = 0; // per rank at `cp`
  std::int32_t id = 0;
  std::int32_t row = 0; // cost row
  std::int32_t cp = 1;
  std::int32_t min_cp = 1;
  std::int32_t reach_from = 0; // the size `reach` was worked out from (0: not yet)
  std::int32_t reach = 0;      // the largest size its search looks at from `reach_from`
};

//! What every levelled run starts from: the samples at the least-area sizes, by work per token.
struct levelled_start {
  std::vector<levelled_slot> slots; // descending work per token, then descending length, then id
  std::int64_t min_tokens = 0;      // the fewest rank tokens of any sample
  std::int64_t rank_tokens = 0;     // sum of rank tokens x CP size
};

//! The start at `sizes` (which give every sample of a cost row the same size). Worked out and
//! sorted once per row; each row's samples then follow in ascending id, which is where a sort of
//! every sample by (key, id) puts them (rows differ in length, so in key).
template <class Estimator>
[[nodiscard]] levelled_start levelled_inputs(const cost_rows<Estimator>& costs,
                                             const sample_sizes& sizes) {
  const problem& pr = costs.batch();
  const std::size_t rows = costs.rows();
  levelled_start out;
  out.min_tokens = costs.budget();
  std::vector<double> row_per_token(rows);
  std::vector<std::int64_t> row_tokens(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t first = costs.first_sample(r);
    const auto uf = static_cast<std::size_t>(first);
    row_tokens[r] = costs.tokens(first, sizes.cp[uf]);
    row_per_token[r] = sizes.cost[uf] / static_cast<double>(row_tokens[r]);
    out.min_tokens = std::min(out.min_tokens, row_tokens[r]);
  }
  // the samples of each row, ascending (a counting sort by row)
  std::vector<std::int32_t> start(rows + 1, 0);
  for (std::int32_t s = 0; s < costs.samples(); ++s) {
    const auto us = static_cast<std::size_t>(s);
    const auto r = static_cast<std::size_t>(costs.row_of(s));
    DCPP_EXPECTS(sizes.cp[us] == sizes.cp[static_cast<std::size_t>(costs.first_sample(r))]);
    ++start[r + 1];
    out.rank_tokens += row_tokens[r] * sizes.cp[us];
  }
  for (std::size_t r = 0; r < rows; ++r)
    start[r + 1] += start[r];
  std::vector<std::int32_t> members(pr.size());
  std::vector<std::int32_t> next(start.begin(), start.end() - 1);
  for (std::int32_t s = 0; s < costs.samples(); ++s)
    members[static_cast<std::size_t>(next[static_cast<std::size_t>(costs.row_of(s))]++)] = s;
  std::vector<std::int32_t> firsts(rows);
  for (std::size_t r = 0; r < rows; ++r)
    firsts[r] = costs.first_sample(r);
  sort_ids_by_key(firsts, [&](std::int32_t a) {
    const auto r = static_cast<std::size_t>(costs.row_of(a));
    return std::pair(-row_per_token[r], -pr.lengths[static_cast<std::size_t>(a)]);
  });
  out.slots.resize(pr.size());
  std::size_t k = 0;
  for (const std::int32_t f : firsts) {
    const std::int32_t r = costs.row_of(f);
    const auto ur = static_cast<std::size_t>(r);
    for (auto m = start[ur]; m < start[ur + 1]; ++m) {
      const std::int32_t s = members[static_cast<std::size_t>(m)];
      const auto us = static_cast<std::size_t>(s);
      levelled_slot& x = out.slots[k++];
      x.cost = sizes.cost[us];
      x.per_token = row_per_token[ur];
      x.row = r;
      x.length = pr.lengths[us];
      x.id = s;
      x.cp = sizes.cp[us];
      x.tokens = row_tokens[ur];
      x.min_cp = pr.min_cp_of[us];
    }
  }
  return out;
}

//! How one levelled run reaches for larger groups.
struct levelled_reach {
  //! A sample joins a group of a larger size where it costs at most this factor of its area.
  double area = 1.05;
  //! A sample costing more than this share of its round's level joins no group (it opens one
  //! on free ranks or waits for the next round); 0: off.
  double heavy_share = 0;
  //! End a round once no sample left can join it (checked after long runs of misses) instead
  //! of scanning the rest: the same rounds, faster (false only to prove that in a test).
  bool end_rounds_early = true;
  //! A sample above its round's level moves to a larger group when its area grows at most by
  //! this factor; 0: `balanced_tuning::raise_area`.
  double raise_area = 0;
  //! A sample that fits no group within the reach may ride in a larger group whose load stays
  //! at or below the round's maximum with it (the round is no slower; its slack, which no
  //! sample of the group's size is left to fill, carries work that later rounds lose).
  bool free_ride = false;
  //! Defer a row's samples together once one of them misses while all are alike (see
  //! `levelled`): the same rounds, faster (false only to prove that in a test).
  bool skip_alike = true;
};

namespace levelled_detail {

//! Moves slot x to a larger CP size when its cost exceeds `level` and a larger group brings it
//! to the level (or as close as the ladder goes) for at most `raise_area` times its rank area.
//! Each step up may leave `(new cp - old cp) x budget` rank tokens unused: it is paid from
//! `spare_tokens`, the rank tokens the allowed rounds hold beyond what the samples need.
template <class Estimator>
void raise_to_level(levelled_slot& x, double level, std::int64_t& spare_tokens,
                    const cost_rows<Estimator>& costs, double raise_area) {
  if (x.cost <= level)
    return;
  const double area = x.cost * x.cp;
  for (const std::int32_t c :
       ladder_between(costs.batch(), x.min_cp, costs.options().effective_max_cp())) {
    if (c <= x.cp)
      continue;
    const double w = costs.row_cost(x.row, c);
    const std::int64_t price = std::int64_t{c - x.cp} * costs.budget();
    if (w * c > raise_area * area || w >= x.cost || price > spare_tokens)
      break;
    spare_tokens -= price;
    x.cp = c;
    x.cost = w;
    x.tokens = tokens_per_rank(costs.options(), x.length, c);
    if (w <= level)
      break;
  }
}

//! Raises the round count to the micro-batch multiple by halving rounds inside their groups:
//! the round with the largest maximum load among those with a group of two samples or more
//! becomes two rounds on the same groups (same ranks), each group's samples dealt to the halves
//! by longest processing time; a group of one sample goes whole to the half with less area so
//! far. Every rank that worked keeps working and the halves carry about half the load each,
//! where `split_to_multiple`'s split by groups leaves half the ranks idle in both halves and the
//! local search then moves samples back one at a time (the micro-batch multiple cost up to 44x
//! the planning time on small samples: docs/benchmarks.md, scaling corners). Rounds of single
//! samples only are left to `split_to_multiple`. Used where the groups average at least
//! `balanced_tuning::halve_samples_per_group` samples (see there).
template <class Estimator>
void halve_to_multiple(std::vector<microbatch_state>& rounds, const cost_rows<Estimator>& costs) {
  const plan_options& o = costs.options();
  const auto multiple = static_cast<std::size_t>(o.microbatch_multiple);
  std::vector<std::pair<double, std::int32_t>> dealt; // (cost, sample) of one group
  while (rounds.size() % multiple != 0) {
    std::optional<std::size_t> pick;
    double pick_max = 0;
    for (std::size_t m = 0; m < rounds.size(); ++m) {
      double max_load = 0;
      bool splittable = false;
      for (const auto& g : rounds[m].groups()) {
        max_load = std::max(max_load, g.load);
        splittable = splittable || g.samples.size() >= 2;
      }
      if (splittable && (!pick || max_load > pick_max)) {
        pick = m;
        pick_max = max_load;
      }
    }
    if (!pick)
      break;
    microbatch_state halves[2] = {microbatch_state(costs.world()), microbatch_state(costs.world())};
    double area[2] = {0, 0};
    for (const auto& g : rounds[*pick].groups()) {
      if (g.samples.empty())
        continue;
      if (g.samples.size() == 1) {
        const int h = area[0] <= area[1] ? 0 : 1;
        const std::int32_t id = halves[h].open(g.first_rank, g.cp);
        halves[h].add(id, g.samples.front(), g.tokens, g.load);
        area[h] += g.load * g.cp;
        continue;
      }
      dealt.clear();
      for (const std::int32_t s : g.samples)
        dealt.emplace_back(costs.cost(s, g.cp), s);
      std::stable_sort(dealt.begin(), dealt.end(),
                       [](const auto& x, const auto& y) { return x.first > y.first; });
      const std::int32_t ids[2] = {halves[0].open(g.first_rank, g.cp),
                                   halves[1].open(g.first_rank, g.cp)};
      double load[2] = {0, 0};
      for (const auto& [w, s] : dealt) {
        const int h = load[0] <= load[1] ? 0 : 1;
        halves[h].add(ids[h], s, costs.tokens(s, g.cp), w);
        load[h] += w;
      }
      area[0] += load[0] * g.cp;
      area[1] += load[1] * g.cp;
    }
    rounds[*pick] = std::move(halves[0]);
    rounds.insert(rounds.begin() + static_cast<std::ptrdiff_t>(*pick) + 1, std::move(halves[1]));
  }
  split_to_multiple(rounds, o.microbatch_multiple, costs.batch(), costs.estimator(),
                    /*grow=*/false);
}

} // namespace levelled_detail

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
  const plan_options& o = costs.options();
  const std::int32_t world = costs.world();
  const std::int64_t budget = costs.budget();
  const std::int32_t max_cp = o.effective_max_cp();
  const problem& pr = costs.batch();
  const double raise_area = reach.raise_area > 0 ? reach.raise_area : tuning.raise_area;
  // positions in `slots` of the samples not placed yet, in order
  std::vector<std::int32_t> remaining(slots.size());
  std::iota(remaining.begin(), remaining.end(), 0);
  const std::int64_t min_tokens = start.min_tokens;
  std::int64_t spare_tokens = rounds_allowed * world * budget - start.rank_tokens;
  std::vector<microbatch_state> rounds;
  const std::size_t sizes = costs.sizes();
  // per CP size with a group: (load, group of the round) and (tokens, group); a group's tokens
  // stay within the budget (below 2^37) and its index within the world (below 2^26), so a
  // (tokens, group) entry packs into 64 bits. Made when the first group of the size opens
  // (`per_size`), so a world of many legal sizes does not pay for all of them (a contiguous world
  // of 2^24 ranks has 2^24: heaps for each took 4 GB on 2 samples).
  constexpr int token_bits = 38;
  static_assert(max_tokens_per_rank_limit < std::int64_t{1} << (token_bits - 1) &&
                max_world_size <= std::int64_t{1} << (64 - token_bits));
  struct size_heaps {
    indexed_heap<double> by_load;
    indexed_heap<std::int64_t, token_bits> by_tokens;
  };
  per_size<size_heaps> heaps;
  heaps.reset(sizes);
  // A quick, exact "no" for a sample that fits no group of the round (most visits of a full
  // round): per CP size the most token room of any group (-1: none; rooms only shrink in a
  // round; a size's heaps hold an entry exactly when its room is >= 0), and per sample the
  // largest size its search would look at (the area limit), worked out once per (sample, size).
  std::vector<std::int64_t> room(sizes, -1);
  const auto cost_at = [&](const levelled_slot& x, std::int32_t c) {
    return costs.row_cost(x.row, c);
  };
  const auto tokens_at = [&](const levelled_slot& x, std::int32_t c) {
    return tokens_per_rank(o, x.length, c);
  };
  // the largest size x's search looks at from size c (cached in the slot)
  const auto reach_of = [&](levelled_slot& x, std::int32_t c) {
    if (x.reach_from != c) {
      const double area = x.cost * c;
      std::int32_t r = c;
      for (const std::int32_t c2 : ladder_between(pr, std::int64_t{c} * 2, max_cp)) {
        if (cost_at(x, c2) * c2 > reach.area * area)
          break;
        r = c2;
      }
      x.reach_from = c;
      x.reach = r;
    }
    return x.reach;
  };
  // at x's size or a larger one of its search (the doublings from x.cp are its ladder's sizes
  // from there on)
  const auto fits_somewhere = [&](levelled_slot& x) {
    for (const std::int32_t c2 : ladder_between(pr, x.cp, reach_of(x, x.cp)))
      if (room[costs.size_index(c2)] >= (c2 == x.cp ? x.tokens : tokens_at(x, c2)))
        return true;
    return false;
  };
  // Runs of identical misses. The samples of a cost row lie side by side in `slots` and are
  // alike (length, size, cost) until one is raised or joins a larger group; while every unplaced
  // sample of a row still has the row's start size, a miss of one is a miss of all the row's
  // samples after it in the round (a miss changes nothing the next one looks at), so they are
  // deferred together: the rounds are the same as one by one, without visiting each (on a
  // million samples nearly every visit was such a miss; docs/benchmarks.md, scaling corners).
  // Per row: where its samples end in `slots`, its start size (0: the row's samples are not
  // side by side or not alike, never skipped), and how many of its unplaced samples are at
  // another size.
  std::vector<std::int32_t> row_begin(costs.rows(), 0);
  std::vector<std::int32_t> row_end(costs.rows(), -1);
  std::vector<std::int32_t> row_cp(costs.rows(), 0);
  std::vector<std::int32_t> off_start(costs.rows(), 0);
  for (std::size_t p = 0; p < slots.size(); ++p) {
    const levelled_slot& x = slots[p];
    const auto r = static_cast<std::size_t>(x.row);
    if (row_end[r] < 0) {
      row_begin[r] = static_cast<std::int32_t>(p);
      row_cp[r] = x.cp;
    } else if (row_end[r] != static_cast<std::int32_t>(p) || x.cp != row_cp[r] ||
               x.cost != slots[p - 1].cost || x.tokens != slots[p - 1].tokens ||
               x.length != slots[p - 1].length || x.min_cp != slots[p - 1].min_cp) {
      row_cp[r] = 0;
    }
    row_end[r] = static_cast<std::int32_t>(p) + 1;
  }
  // every unplaced sample of x's row is alike x
  const auto alike = [&](const levelled_slot& x) {
    const auto r = static_cast<std::size_t>(x.row);
    return reach.skip_alike && row_cp[r] != 0 && x.cp == row_cp[r] && off_start[r] == 0;
  };
  std::vector<std::int32_t> deferred;
  while (!remaining.empty()) {
    microbatch_state mb(world);
    const auto tokens_of = [&mb](std::int32_t id) {
      return mb.groups()[static_cast<std::size_t>(id)].tokens;
    };
    heaps.each([&](std::size_t l, size_heaps& h) {
      h.by_load.clear();
      h.by_tokens.clear();
      room[l] = -1;
    });
    deferred.clear();
    // the round's level: what a rank full of tokens costs at the token-weighted mean work per
    // token of the samples that would fill this round
    double level_cost = 0;
    {
      const std::int64_t capacity = std::int64_t{world} * budget;
      std::int64_t filled = 0;
      double work = 0;
      for (std::size_t k = 0; k < remaining.size() && filled < capacity; ++k) {
        const levelled_slot& x = slots[static_cast<std::size_t>(remaining[k])];
        const std::int64_t t = x.tokens * x.cp;
        filled += t;
        work += x.per_token * static_cast<double>(t);
      }
      level_cost = work / static_cast<double>(filled) * static_cast<double>(budget);
    }
    const auto room_left = [&] {
      for (const std::size_t l : heaps.made_sizes())
        if (const std::int64_t r = room[l]; r >= 0 && r >= min_tokens)
          return true;
      return false;
    };
    // A round without free ranks whose groups have room only for samples that cannot reach
    // them (too small for a large group's area limit) would otherwise be scanned to the end for
    // nothing. After a long run of misses the rest is checked from its end, where the smallest
    // samples are: the round ends when no sample from position i on is due a raise and none
    // fits a group at a size its search includes, i.e. when a full scan would defer exactly
    // those samples and change nothing else. The check stops at the first sample that may fit.
    std::size_t next_check = 0;
    const auto exhausted = [&](std::size_t i, std::int32_t run, double round_max) {
      const std::size_t rest = remaining.size() - i;
      const auto fraction = static_cast<std::size_t>(tuning.early_end_fraction);
      if (!reach.end_rounds_early || run < tuning.early_end_misses ||
          static_cast<std::size_t>(run) * fraction < rest || i < next_check)
        return false;
      next_check = i + rest / fraction;
      const double level = std::max(level_cost, round_max);
      for (std::size_t j = remaining.size(); j-- > i;) {
        levelled_slot& x = slots[static_cast<std::size_t>(remaining[j])];
        if (x.cost > level || fits_somewhere(x))
          return false;
        if (alike(x)) // the row's samples before it answer the same
          j = static_cast<std::size_t>(
              std::lower_bound(remaining.begin() + static_cast<std::ptrdiff_t>(i),
                               remaining.begin() + static_cast<std::ptrdiff_t>(j),
                               row_begin[static_cast<std::size_t>(x.row)]) -
              remaining.begin());
      }
      return true;
    };
    std::int32_t misses = 0;
    double round_max = 0;
    // a full round: no free ranks and no group with room for the smallest sample (checked
    // every `full_round_check_every` misses, at the top of position i)
    const auto round_full = [&](std::size_t i) {
      return misses > 0 && misses % tuning.full_round_check_every == 0 && mb.free_ranks() == 0 &&
             (!room_left() || exhausted(i, misses, round_max));
    };
    const auto defer_rest = [&](std::size_t i) {
      deferred.insert(deferred.end(), remaining.begin() + static_cast<std::ptrdiff_t>(i),
                      remaining.end());
    };
    for (std::size_t i = 0; i < remaining.size(); ++i) {
      if (round_full(i)) {
        defer_rest(i);
        break;
      }
      levelled_slot& x = slots[static_cast<std::size_t>(remaining[i])];
      const double level = std::max(level_cost, round_max);
      const std::int32_t start_cp = row_cp[static_cast<std::size_t>(x.row)];
      const bool was_off = x.cp != start_cp;
      levelled_detail::raise_to_level(x, level, spare_tokens, costs, raise_area);
      if (!was_off && x.cp != start_cp)
        ++off_start[static_cast<std::size_t>(x.row)]; // raised: counted until placed
      const std::int32_t c = x.cp;
      std::int32_t chosen = -1;
      std::int32_t chosen_cp = c;
      if (const auto first = mb.free_block(o, c)) {
        chosen = mb.open(*first, c);
      } else if (!(reach.heavy_share > 0 && x.cost > reach.heavy_share * level) &&
                 fits_somewhere(x)) {
        // the least-loaded group with token room (among the first few by load, else the one
        // with the most room), of this size or of a larger one within the reach (up to x.reach,
        // which fits_somewhere has worked out)
        double best = std::numeric_limits<double>::infinity();
        for (const std::int32_t c2 : ladder_between(pr, c, x.reach)) {
          const double w2 = c2 == c ? x.cost : cost_at(x, c2);
          const std::int64_t t2 = c2 == c ? x.tokens : tokens_at(x, c2);
          const std::size_t l = costs.size_index(c2);
          if (room[l] < t2)
            continue; // no group of this size has the token room (or none is open)
          size_heaps& h = *heaps.find(l);
          std::int32_t found = h.by_tokens.top()->second; // the roomiest
          h.by_load.visit(tuning.candidates_per_size, [&](const auto& e) {
            if (tokens_of(e.second) + t2 > budget)
              return false;
            found = e.second;
            return true;
          });
          const double load = mb.groups()[static_cast<std::size_t>(found)].load + w2;
          if (load < best) {
            best = load;
            chosen = found;
            chosen_cp = c2;
          }
        }
      }
      if (chosen < 0 && reach.free_ride && mb.free_ranks() == 0) {
        // a larger group with slack up to the round's maximum and token room
        for (const std::int32_t c2 : ladder_between(pr, std::int64_t{c} * 2, max_cp)) {
          const std::size_t l = costs.size_index(c2);
          if (room[l] < 0)
            continue; // no group of this size is open
          size_heaps& h = *heaps.find(l);
          const double w2 = cost_at(x, c2);
          if (w2 * c2 > tuning.ride_area * x.cost * x.cp)
            break; // larger sizes cost more area still
          const std::int64_t t2 = tokens_at(x, c2);
          if (h.by_load.top()->first + w2 > round_max || room[l] < t2)
            continue; // no group of this size has the slack, or none the token room
          h.by_load.visit(tuning.candidates_per_size, [&](const auto& e) {
            if (e.first + w2 > round_max)
              return true; // the rest are loaded more
            if (tokens_of(e.second) + t2 > budget)
              return false;
            chosen = e.second;
            return true;
          });
          if (chosen >= 0) {
            chosen_cp = c2;
            break;
          }
        }
      }
      if (chosen < 0) {
        ++misses;
        deferred.push_back(remaining[i]);
        if (!alike(x))
          continue;
        const auto r = static_cast<std::size_t>(x.row);
        const auto first = remaining.begin() + static_cast<std::ptrdiff_t>(i) + 1;
        if (first == remaining.end() || *first >= row_end[r])
          continue; // x was its row's last unplaced sample: none to defer with it
        // the rest of the row misses too: defer it at once, with the full-round checks a scan
        // one by one would make on the way. The row's samples lie side by side in `remaining`
        // (ascending positions in `slots`): steps doubling from `first` bracket their end,
        // a binary search finds it (a run of n costs about 2 log2 n reads, not log2 of all)
        auto lo = first + 1;
        auto hi = remaining.end();
        for (std::ptrdiff_t step = 1; step < hi - lo; step *= 2) {
          const auto probe = lo + (step - 1);
          if (*probe >= row_end[r]) {
            hi = probe;
            break;
          }
          lo = probe + 1;
        }
        const auto last = std::lower_bound(lo, hi, row_end[r]);
        const auto end = i + 1 + static_cast<std::size_t>(last - first);
        const std::int32_t every = tuning.full_round_check_every;
        bool full = false;
        // positions i+1.. start with misses, misses+1, ...; the checks fall where that count is
        // a multiple of `every` (the ranks and rooms they look at stay as they are)
        const std::int32_t since_check = misses % every;
        std::size_t p =
            i + 1 + static_cast<std::size_t>(since_check == 0 ? 0 : every - since_check);
        const std::int32_t base = misses - static_cast<std::int32_t>(i + 1);
        if (p < end && mb.free_ranks() == 0) {
          full = !room_left();
          for (; !full && p < end; p += static_cast<std::size_t>(every))
            full = exhausted(p, base + static_cast<std::int32_t>(p), round_max);
        }
        if (full) {
          defer_rest(i + 1);
          break;
        }
        deferred.insert(deferred.end(), first, last);
        misses = base + static_cast<std::int32_t>(end);
        i = end - 1;
        continue;
      }
      if (start_cp != 0 && x.cp != start_cp)
        --off_start[static_cast<std::size_t>(x.row)]; // placed: no longer counted
      misses = 0;
      if (chosen_cp != c) {
        x.cp = chosen_cp;
        x.cost = cost_at(x, chosen_cp);
        x.tokens = tokens_at(x, chosen_cp);
      }
      const std::size_t l = costs.size_index(chosen_cp);
      auto& g = mb.groups()[static_cast<std::size_t>(chosen)];
      mb.add(chosen, x.id, x.tokens, x.cost);
      round_max = std::max(round_max, g.load);
      size_heaps& h = heaps.make(l);
      h.by_load.set(g.load, chosen);
      h.by_tokens.set(g.tokens, chosen);
      room[l] = budget - h.by_tokens.top()->first;
    }
    rounds.push_back(std::move(mb));
    remaining.swap(deferred);
  }
  sample_sizes chosen;
  chosen.cp.resize(slots.size());
  chosen.cost.resize(slots.size());
  for (const levelled_slot& x : slots) {
    chosen.cp[static_cast<std::size_t>(x.id)] = x.cp;
    chosen.cost[static_cast<std::size_t>(x.id)] = x.cost;
  }
  if (rounds.size() % static_cast<std::size_t>(o.microbatch_multiple) != 0) {
    std::size_t groups = 0;
    for (const microbatch_state& mb : rounds)
      groups += mb.groups().size();
    if (static_cast<double>(slots.size()) >=
        tuning.halve_samples_per_group * static_cast<double>(groups))
      levelled_detail::halve_to_multiple(rounds, costs);
    else
      split_to_multiple(rounds, o.microbatch_multiple, costs.batch(), costs.estimator(),
                        /*grow=*/false);
  }
  return assignment<Estimator>::from_rounds(costs, std::move(rounds), std::move(chosen));
}

} // namespace dcpp::detail
