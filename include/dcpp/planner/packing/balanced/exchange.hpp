// The tile exchange the balanced portfolio ends with: blocks of ranks traded whole between
// rounds, so that the slowest blocks share rounds and the light ones fill the others.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "dcpp/core/config.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/plan.hpp"
#include "dcpp/planner/util/indexed_heap.hpp"

namespace dcpp::detail {

//! A group as the tile exchange moves it: its round and first rank change, nothing else.
//! `index`: its place in the list `exchange_inputs` made.
struct exchanged_group {
  std::int32_t round;
  std::int32_t first;
  std::int32_t cp;
  std::int32_t index;
  double load;
  friend bool operator<(const exchanged_group& x, const exchanged_group& y) {
    return x.round != y.round ? x.round < y.round : x.first < y.first;
  }
};

//! A tile one round's groups touch in `exchange_tiles_of_size`: movable when every group in it
//! starts and ends in it (and it is whole), fixed otherwise (with every tile a group crossing
//! into it covers).
struct touched_tile {
  std::int32_t tile;
  std::int32_t last; // the last tile its groups reach (== tile when movable)
  double load;       // its slowest group
  bool movable;
  std::size_t from; // its groups: groups[from, to)
  std::size_t to;
};

//! Per round, the tiles its groups touch, in rank order (`touched[round_start[m],
//! round_start[m + 1])`), its slowest fixed group and its count of places for movable tiles.
struct tile_survey {
  std::vector<touched_tile> touched;
  std::vector<std::size_t> round_start;
  std::vector<double> fixed;
  std::vector<std::int32_t> places;
};

inline tile_survey survey_tiles(const std::vector<exchanged_group>& groups, std::int32_t rounds,
                                std::int32_t tile, std::int32_t tiles) {
  tile_survey s;
  s.round_start.assign(static_cast<std::size_t>(rounds) + 1, 0);
  s.fixed.assign(static_cast<std::size_t>(rounds), 0.0);
  s.places.assign(static_cast<std::size_t>(rounds), 0);
  std::size_t i = 0;
  for (std::int32_t m = 0; m < rounds; ++m) {
    std::int32_t reached = -1; // the last tile a group so far reaches
    std::int32_t fixed_tiles = 0;
    while (i < groups.size() && groups[i].round == m) {
      const std::int32_t k = groups[i].first / tile;
      touched_tile t{k, k, 0.0, k < tiles && k > reached, i, i};
      for (; i < groups.size() && groups[i].round == m && groups[i].first / tile == k; ++i) {
        t.load = std::max(t.load, groups[i].load);
        t.last = std::max(t.last, (groups[i].first + groups[i].cp - 1) / tile);
      }
      t.to = i;
      t.movable = t.movable && t.last == k;
      if (!t.movable) {
        s.fixed[static_cast<std::size_t>(m)] =
            std::max(s.fixed[static_cast<std::size_t>(m)], t.load);
        // whole tiles from k (or past those counted) to its last
        const std::int32_t from = std::max(k, reached + 1);
        const std::int32_t to = std::min(t.last, tiles - 1);
        fixed_tiles += std::max(0, to - from + 1);
      }
      reached = std::max(reached, t.last);
      s.touched.push_back(t);
    }
    s.places[static_cast<std::size_t>(m)] = tiles - fixed_tiles;
    s.round_start[static_cast<std::size_t>(m) + 1] = s.touched.size();
  }
  return s;
}

//! Where each movable tile goes (`dealt_to`, -1 for the others), how many tiles come to each
//! round, and each round's new maximum.
struct tile_dealing {
  std::vector<std::int32_t> dealt_to;
  std::vector<std::int32_t> incoming;
  std::vector<double> most;
};

//! The movable tiles dealt slowest first (then in round and tile order: deterministic): to its
//! own round where that costs nothing, else to the round with the largest maximum so far that
//! has a place left. None where no tile is movable.
inline std::optional<tile_dealing> deal_tiles(const tile_survey& s,
                                              const std::vector<exchanged_group>& groups) {
  const std::vector<touched_tile>& touched = s.touched;
  const auto rounds = static_cast<std::int32_t>(s.fixed.size());
  std::vector<std::pair<double, std::size_t>> by_load; // (-load, index in touched)
  for (std::size_t t = 0; t < touched.size(); ++t)
    if (touched[t].movable)
      by_load.emplace_back(-touched[t].load, t);
  if (by_load.empty())
    return std::nullopt;
  std::sort(by_load.begin(), by_load.end());
  tile_dealing d{std::vector<std::int32_t>(touched.size(), -1),
                 std::vector<std::int32_t>(static_cast<std::size_t>(rounds), 0), s.fixed};
  std::vector<std::int32_t> left = s.places;
  indexed_heap<double> by_most; // (-maximum, round) of the rounds with a place left
  for (std::int32_t m = 0; m < rounds; ++m)
    if (left[static_cast<std::size_t>(m)] > 0)
      by_most.set(-d.most[static_cast<std::size_t>(m)], m);
  for (const auto& [minus_load, u] : by_load) {
    const double load = touched[u].load;
    const std::int32_t own = groups[touched[u].from].round;
    std::int32_t to = own;
    if (left[static_cast<std::size_t>(to)] == 0 || d.most[static_cast<std::size_t>(to)] < load)
      to = by_most.top()->second; // a place is left: each unit holds one in its own round
    const auto ut = static_cast<std::size_t>(to);
    d.dealt_to[u] = to;
    if (to != own)
      ++d.incoming[ut];
    d.most[ut] = std::max(d.most[ut], load);
    if (--left[ut] == 0)
      by_most.erase(to);
    else
      by_most.set(-d.most[ut], to);
  }
  return d;
}

//! The groups after a dealing, again by round and first rank. A unit staying in its round keeps
//! its tile; one that comes takes a tile of its new round that a unit has left or that no group
//! touches, lowest first.
inline std::vector<exchanged_group> place_tiles(const std::vector<exchanged_group>& groups,
                                                const tile_survey& s, const tile_dealing& d,
                                                std::int32_t tile, std::int32_t tiles) {
  const std::vector<touched_tile>& touched = s.touched;
  const std::vector<std::size_t>& round_start = s.round_start;
  const auto rounds = static_cast<std::int32_t>(s.fixed.size());
  // per round, its open tiles: open[open_start[m], open_start[m + 1])
  std::vector<std::size_t> open_start(static_cast<std::size_t>(rounds) + 1, 0);
  for (std::int32_t m = 0; m < rounds; ++m)
    open_start[static_cast<std::size_t>(m) + 1] =
        open_start[static_cast<std::size_t>(m)] +
        static_cast<std::size_t>(d.incoming[static_cast<std::size_t>(m)]);
  std::vector<std::int32_t> open;
  open.reserve(open_start.back());
  for (std::int32_t m = 0; m < rounds; ++m) {
    const std::size_t need = open_start[static_cast<std::size_t>(m) + 1];
    std::int32_t next = 0; // the first tile not looked at yet
    for (std::size_t t = round_start[static_cast<std::size_t>(m)]; open.size() < need; ++t) {
      const bool end = t == round_start[static_cast<std::size_t>(m) + 1];
      const std::int32_t upto = end ? tiles : std::min(touched[t].tile, tiles);
      for (; next < upto && open.size() < need; ++next)
        open.push_back(next); // touched by no group
      if (end)
        break;
      const touched_tile& here = touched[t];
      if (here.movable && d.dealt_to[t] != m && open.size() < need)
        open.push_back(here.tile); // left by its unit
      next = std::max(next, here.last + 1);
    }
    DCPP_EXPECTS(open.size() == need);
  }
  // the units that move, each to the next open tile of its new round (lowest first, so that
  // `arriving`, beside `open`, lists a round's arrivals by their new tile)
  std::vector<std::size_t> taken(open_start.begin(), open_start.end() - 1);
  std::vector<std::size_t> arriving(open.size()); // index in touched
  for (std::int32_t m = 0; m < rounds; ++m)
    for (std::size_t t = round_start[static_cast<std::size_t>(m)];
         t < round_start[static_cast<std::size_t>(m) + 1]; ++t)
      if (touched[t].movable && d.dealt_to[t] != m)
        arriving[taken[static_cast<std::size_t>(d.dealt_to[t])]++] = t;
  // per round, its staying tiles and its arrivals, both in tile order, merged
  std::vector<exchanged_group> next;
  next.reserve(groups.size());
  for (std::int32_t m = 0; m < rounds; ++m) {
    std::size_t t = round_start[static_cast<std::size_t>(m)];
    const std::size_t t_end = round_start[static_cast<std::size_t>(m) + 1];
    std::size_t k = open_start[static_cast<std::size_t>(m)];
    const std::size_t k_end = open_start[static_cast<std::size_t>(m) + 1];
    const auto stays = [&](std::size_t x) { return !touched[x].movable || d.dealt_to[x] == m; };
    for (;;) {
      while (t < t_end && !stays(t))
        ++t;
      if (t == t_end && k == k_end)
        break;
      if (k == k_end || (t < t_end && touched[t].tile < open[k])) {
        next.insert(next.end(), groups.begin() + static_cast<std::ptrdiff_t>(touched[t].from),
                    groups.begin() + static_cast<std::ptrdiff_t>(touched[t].to));
        ++t;
      } else {
        const touched_tile& here = touched[arriving[k]];
        const std::int32_t shift = (open[k] - here.tile) * tile;
        for (std::size_t j = here.from; j < here.to; ++j) {
          exchanged_group g = groups[j];
          g.round = m;
          g.first += shift;
          next.push_back(g);
        }
        ++k;
      }
    }
  }
  DCPP_EXPECTS(next.size() == groups.size());
  return next;
}

//! One tile size's exchange on `groups`, sorted by round and first rank and kept so (see
//! `exchange_tiles`); `maxima` holds each round's largest load and is kept. True when it was
//! taken.
inline bool exchange_tiles_of_size(std::vector<exchanged_group>& groups,
                                   std::vector<double>& maxima, std::int32_t world,
                                   std::int32_t tile, double gain_epsilon) {
  const auto rounds = static_cast<std::int32_t>(maxima.size());
  const std::int32_t tiles = world / tile; // whole tiles per round
  const tile_survey survey = survey_tiles(groups, rounds, tile, tiles);
  std::optional<tile_dealing> dealing = deal_tiles(survey, groups);
  if (!dealing)
    return false;
  double before = 0;
  double after = 0;
  for (std::int32_t m = 0; m < rounds; ++m) {
    before += maxima[static_cast<std::size_t>(m)];
    after += dealing->most[static_cast<std::size_t>(m)];
  }
  if (!(after < before - gain_epsilon * before))
    return false;
  groups = place_tiles(groups, survey, *dealing, tile, tiles);
  maxima = std::move(dealing->most);
  return true;
}

//! Trades tiles of ranks between rounds where that lowers the sum of the rounds' maxima:
//! `groups` lists every group of the rounds (round, first rank, size, load; sorted here by
//! round and first rank), `maxima` each round's largest load; both are kept up to date. For each
//! tile size T, a power of two from half the world down to 1, a round's ranks fall into tiles [kT,
//! (k+1)T); a whole tile that every group in it starts and ends in is movable, and keeps its groups
//! at their offsets wherever it goes: an aligned group (a power of two at most T, at a multiple of
//! its size) stays aligned, a contiguous one legal, and each rank keeps its tokens. Every round
//! keeps its count of movable tiles. They are dealt slowest first (by their slowest group): to
//! their own round where its maximum so far is at least their load, else to the round with the
//! largest maximum so far that has a place left (its fixed groups' maximum to start with), which
//! they raise: the slow tiles gather in a few rounds and the light ones fill the rest. A size's
//! dealing is taken when it lowers the sum by more than `tuning.gain_epsilon` of it; the sizes are
//! swept up to `tuning.tile_exchange_sweeps` times while one is. A round may end empty. Returns
//! whether a group moved. The local search moves one sample or swaps two; this moves the contents
//! of many ranks at once.
inline bool exchange_tiles(std::vector<exchanged_group>& groups, std::vector<double>& maxima,
                           std::int32_t world, const balanced_tuning& tuning) {
  if (maxima.size() < 2 || world < 2)
    return false;
  std::sort(groups.begin(), groups.end());
  bool changed = false;
  for (std::int32_t sweep = 0; sweep < tuning.tile_exchange_sweeps; ++sweep) {
    bool taken = false;
    for (auto tile =
             static_cast<std::int32_t>(std::bit_floor(static_cast<std::uint32_t>(world) / 2));
         tile >= 1; tile /= 2)
      taken = exchange_tiles_of_size(groups, maxima, world, tile, tuning.gain_epsilon) || taken;
    if (!taken)
      break;
    changed = true;
  }
  return changed;
}

//! The groups of `p`'s rounds, round by round in list order, with their loads under `costs`
//! (summed in sample order, as `assignment` sums them), and each round's maximum.
template <class Estimator>
void exchange_inputs(const plan& p, const cost_rows<Estimator>& costs,
                     std::vector<exchanged_group>& groups, std::vector<double>& maxima) {
  groups.clear();
  maxima.assign(p.microbatches.size(), 0.0);
  for (std::size_t m = 0; m < p.microbatches.size(); ++m)
    for (const plan_group& g : p.microbatches[m].groups) {
      double load = 0;
      for (const std::int32_t s : g.samples)
        load = load + costs.cost(s, g.cp);
      groups.push_back({static_cast<std::int32_t>(m), g.first_rank, g.cp,
                        static_cast<std::int32_t>(groups.size()), load});
      maxima[m] = std::max(maxima[m], load);
    }
}

//! Puts `p`'s groups where `groups` (made by `exchange_inputs`, in any order) puts them, each
//! round's groups by first rank.
inline void move_exchanged(plan& p, const std::vector<exchanged_group>& groups) {
  std::vector<plan_group*> listed; // by index
  listed.reserve(groups.size());
  for (plan_microbatch& mb : p.microbatches)
    for (plan_group& g : mb.groups)
      listed.push_back(&g);
  std::vector<plan_microbatch> out(p.microbatches.size());
  for (const exchanged_group& to : groups) {
    plan_group& g = *listed[static_cast<std::size_t>(to.index)];
    out[static_cast<std::size_t>(to.round)].groups.push_back(
        plan_group{to.first, g.cp, std::move(g.samples), 0, 0.0});
  }
  p.microbatches = std::move(out);
}

//! The tile exchange on plan `p` of step time `step`: where it makes the plan faster, `p`'s
//! groups moved and its new step time (as the assignment state sums it; a round may be left
//! empty), else nothing and `p` unchanged.
template <class Estimator>
std::optional<double> exchange_plan_tiles(plan& p, double step, const cost_rows<Estimator>& costs,
                                          std::int32_t world, const balanced_tuning& tuning) {
  std::vector<exchanged_group> groups;
  std::vector<double> maxima;
  exchange_inputs(p, costs, groups, maxima);
  if (!exchange_tiles(groups, maxima, world, tuning))
    return std::nullopt;
  double exchanged = static_cast<double>(maxima.size()) * costs.overhead();
  for (const double m : maxima)
    exchanged += m;
  if (!(exchanged < step))
    return std::nullopt;
  move_exchanged(p, groups);
  return exchanged;
}

} // namespace dcpp::detail
