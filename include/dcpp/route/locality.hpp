// Locality-aware placement: inside each micro-batch, groups of equal CP size trade places (and
// single-rank groups may move onto idle ranks) so that as many tokens as possible are already on
// the rank that will hold them. Step times are unchanged (ranks are interchangeable); only the
// routing volume drops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "dcpp/core/math.hpp"
#include "dcpp/core/zigzag.hpp"
#include "dcpp/planner/plan.hpp"
#include "dcpp/route/route.hpp"

namespace dcpp {

//! Re-places groups within each micro-batch to keep tokens local; deterministic (a pure
//! function of plan and origins, ties broken by index), so every rank gets the same plan.
//! Legal for both topologies: a group only takes the place of a group of the same size, or, with
//! cp = 1, an idle rank. Returns the tokens kept local afterwards.
inline std::int64_t place_for_locality(plan& p, const sample_origins& origins,
                                       std::int64_t padding_unit = 1) {
  const auto n = static_cast<std::size_t>(p.world_size);
  std::vector<std::int32_t> slot_of_rank(n);
  for (std::size_t m = 0; m < p.microbatches.size(); ++m) {
    auto& groups = p.microbatches[m].groups;
    const std::vector<std::int32_t> owner = p.rank_groups(m);
    std::vector<std::int32_t> sizes;
    for (const auto& g : groups)
      sizes.push_back(g.cp);
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    for (const std::int32_t cp : sizes) {
      // Slots: the places of this size's groups, plus idle ranks for cp = 1.
      std::vector<std::int32_t> members, slots;
      for (std::size_t gi = 0; gi < groups.size(); ++gi)
        if (groups[gi].cp == cp) {
          members.push_back(static_cast<std::int32_t>(gi));
          slots.push_back(groups[gi].first_rank);
        }
      if (cp == 1)
        for (std::size_t r = 0; r < n; ++r)
          if (owner[r] < 0)
            slots.push_back(static_cast<std::int32_t>(r));
      std::sort(slots.begin(), slots.end());
      if (slots.size() < 2)
        continue;
      std::fill(slot_of_rank.begin(), slot_of_rank.end(), -1);
      for (std::size_t k = 0; k < slots.size(); ++k)
        for (std::int32_t r = slots[k]; r < slots[k] + cp; ++r)
          slot_of_rank[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(k);
      // Benefit of (group, slot): real tokens its samples would keep on their origin rank.
      std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t> benefit;
      for (std::size_t k = 0; k < members.size(); ++k)
        for (const std::int32_t s : groups[static_cast<std::size_t>(members[k])].samples) {
          const auto si = static_cast<std::size_t>(s);
          const std::int32_t origin = origins.rank[si];
          const std::int32_t slot = slot_of_rank[static_cast<std::size_t>(origin)];
          if (slot < 0)
            continue;
          const std::int64_t length = p.lengths[si];
          const std::int64_t padded = padded_length(length, cp, padding_unit);
          const std::int64_t q = origin - slots[static_cast<std::size_t>(slot)];
          std::int64_t kept = 0;
          for (int half = 0; half < 2; ++half)
            kept += zigzag_real_in_chunk(length, padded, cp, zigzag_chunk_index(cp, q, half));
          benefit[{static_cast<std::int32_t>(k), slot}] += kept;
        }
      std::vector<std::tuple<std::int64_t, std::int32_t, std::int32_t>> order; // (-gain, k, slot)
      order.reserve(benefit.size());
      for (const auto& [key, gain] : benefit)
        order.emplace_back(-gain, key.first, key.second);
      std::sort(order.begin(), order.end());
      std::vector<std::int32_t> placed(members.size(), -1);
      std::vector<char> taken(slots.size(), 0);
      for (const auto& [negative_gain, k, slot] : order)
        if (placed[static_cast<std::size_t>(k)] < 0 && !taken[static_cast<std::size_t>(slot)]) {
          placed[static_cast<std::size_t>(k)] = slot;
          taken[static_cast<std::size_t>(slot)] = 1;
        }
      // The rest keep their own place when it is free, else take the lowest free one.
      for (std::size_t k = 0; k < members.size(); ++k)
        if (placed[k] < 0) {
          const std::int32_t own = slot_of_rank[static_cast<std::size_t>(
              groups[static_cast<std::size_t>(members[k])].first_rank)];
          if (!taken[static_cast<std::size_t>(own)]) {
            placed[k] = own;
            taken[static_cast<std::size_t>(own)] = 1;
          }
        }
      std::size_t next_free = 0;
      for (std::size_t k = 0; k < members.size(); ++k)
        if (placed[k] < 0) {
          while (taken[next_free])
            ++next_free;
          placed[k] = static_cast<std::int32_t>(next_free);
          taken[next_free] = 1;
        }
      for (std::size_t k = 0; k < members.size(); ++k)
        groups[static_cast<std::size_t>(members[k])].first_rank =
            slots[static_cast<std::size_t>(placed[k])];
    }
  }
  canonicalize(p);
  for (auto& mb : p.microbatches) { // idle count is unchanged by construction; keep it exact
    std::int32_t covered = 0;
    for (const auto& g : mb.groups)
      covered += g.cp;
    mb.idle_ranks = p.world_size - covered;
  }
  return measure_route(p, origins, padding_unit).tokens_local;
}

} // namespace dcpp
