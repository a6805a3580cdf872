// The tiled construction of the balanced portfolio: every round the same tiling of the world
// into groups of at most a given size, samples (costliest first) each onto the group where it
// raises the step time least. It carries the one-size static plan to worlds that size does not
// divide (48 ranks: a group of 32 and one of 16 each round).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "dcpp/core/math.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing.hpp"

namespace dcpp::detail {

//! The world tiled with groups of at most `widest` ranks, largest legal size first, each
//! aligned to its size in the aligned topology: (first rank, size) in rank order. 48 ranks at
//! 32: {0, 32}, {32, 16}.
[[nodiscard]] inline std::vector<std::pair<std::int32_t, std::int32_t>>
world_tiling(const problem& pr, std::int32_t widest) {
  std::vector<std::pair<std::int32_t, std::int32_t>> tiles;
  const std::int32_t world = pr.options.world_size;
  const bool aligned = aligned_offsets(pr.options.group_topology);
  for (std::int32_t offset = 0; offset < world;) {
    std::int32_t pick = 0;
    for (const std::int32_t c : pr.cp_sizes)
      if (c <= widest && c <= world - offset && (!aligned || offset % c == 0))
        pick = c;
    if (pick == 0)
      return {}; // no legal size fits the rest (cannot happen: min_cp divides the world)
    tiles.emplace_back(offset, pick);
    offset += pick;
  }
  return tiles;
}

//! Samples, costliest at `widest` first (ties by id), each onto the (round, tile), among those
//! of a size it may use with token room, that raises its round's maximum load least (the step
//! time is the sum of the rounds' maxima), then where it fills the slot most (best fit), then
//! the earliest; the rounds start at the token minimum at `widest` and grow by micro-batch
//! multiples when a sample fits nowhere. Empty when `widest` is below some sample's smallest
//! size, when the placement would examine more than `max_work` (samples x rounds x tiles)
//! candidates, or when it needs more than `max_rounds` rounds.
template <class Estimator>
[[nodiscard]] std::optional<plan> tiled(const cost_rows<Estimator>& costs, std::int32_t widest,
                                        std::string_view name, std::int64_t max_work,
                                        std::int64_t max_rounds) {
  const problem& pr = costs.batch();
  const plan_options& o = pr.options;
  const auto tiles = world_tiling(pr, widest);
  if (tiles.empty())
    return std::nullopt;
  const auto n = static_cast<std::size_t>(costs.samples());
  std::int64_t rank_tokens = 0;
  std::vector<double> key(n);
  for (std::size_t s = 0; s < n; ++s) {
    const auto id = static_cast<std::int32_t>(s);
    if (pr.min_cp_of[s] > widest)
      return std::nullopt;
    key[s] = costs.cost(id, widest);
    rank_tokens += costs.tokens(id, widest) * widest;
  }
  const std::int64_t capacity = std::int64_t{o.world_size} * o.max_tokens_per_rank;
  auto rounds =
      static_cast<std::int32_t>(std::max<std::int64_t>(1, ceil_div(rank_tokens, capacity)));
  rounds = round_up(rounds, o.microbatch_multiple);
  if (rounds > max_rounds ||
      static_cast<std::int64_t>(n) * rounds * static_cast<std::int64_t>(tiles.size()) > max_work)
    return std::nullopt;
  std::vector<std::int32_t> order(n);
  for (std::size_t s = 0; s < n; ++s)
    order[s] = static_cast<std::int32_t>(s);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return key[static_cast<std::size_t>(a)] > key[static_cast<std::size_t>(b)];
  });

  struct slot {
    double load = 0;
    std::int64_t tokens = 0;
    std::vector<std::int32_t> samples;
  };
  std::vector<slot> slots(static_cast<std::size_t>(rounds) * tiles.size());
  std::vector<double> round_max(static_cast<std::size_t>(rounds), 0.0);
  for (const std::int32_t s : order) {
    const auto us = static_cast<std::size_t>(s);
    constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
    std::size_t chosen = none;
    double raise = std::numeric_limits<double>::infinity(); // of the round's maximum
    double fill = 0;                                        // the slot's load with the sample
    double cost = 0;
    std::int64_t tokens = 0;
    while (chosen == none) {
      for (std::size_t t = 0; t < tiles.size(); ++t) {
        const std::int32_t c = tiles[t].second;
        if (c < pr.min_cp_of[us])
          continue;
        const double w = costs.cost(s, c);
        const std::int64_t need = costs.tokens(s, c);
        for (std::size_t i = t; i < slots.size(); i += tiles.size()) {
          const slot& sl = slots[i];
          if (sl.tokens + need > o.max_tokens_per_rank)
            continue;
          const double load = sl.load + w;
          const double up = std::max(0.0, load - round_max[i / tiles.size()]);
          // least raise of the round's maximum, then the fullest slot (best fit), then order
          if (up < raise || (up == raise && (load > fill || (load == fill && i < chosen)))) {
            chosen = i;
            raise = up;
            fill = load;
            cost = w;
            tokens = need;
          }
        }
      }
      if (chosen == none) { // fits nowhere: more rounds, within the limits
        const auto more = static_cast<std::int64_t>(round_max.size()) + o.microbatch_multiple;
        if (more > max_rounds ||
            static_cast<std::int64_t>(n) * more * static_cast<std::int64_t>(tiles.size()) >
                max_work)
          return std::nullopt;
        slots.resize(slots.size() + static_cast<std::size_t>(o.microbatch_multiple) * tiles.size());
        round_max.resize(slots.size() / tiles.size(), 0.0);
      }
    }
    slot& sl = slots[chosen];
    sl.load += cost;
    sl.tokens += tokens;
    sl.samples.push_back(s);
    double& top = round_max[chosen / tiles.size()];
    top = std::max(top, sl.load);
  }
  plan p = make_plan_shell(pr, name);
  p.microbatches.resize(slots.size() / tiles.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].samples.empty())
      continue;
    const auto& [first, c] = tiles[i % tiles.size()];
    p.microbatches[i / tiles.size()].groups.push_back(
        plan_group{first, c, std::move(slots[i].samples), 0, 0.0});
  }
  // a round left empty (more rounds than the samples needed) is dropped
  std::erase_if(p.microbatches, [](const plan_microbatch& mb) { return mb.groups.empty(); });
  if (p.microbatches.size() % static_cast<std::size_t>(o.microbatch_multiple) != 0)
    return std::nullopt;
  return p;
}

} // namespace dcpp::detail
