// The plan's hash: what ranks compare collectively to prove they computed the same plan.
#pragma once

#include <cstdint>

#include "dcpp/core/math.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

//! 64-bit FNV-1a over the plan's canonical integer content (world, budget, lengths, groups).
//! Ranks compare it collectively to prove they computed the same plan.
inline std::uint64_t plan_hash(const plan& p) {
  fnv1a h;
  auto mix = [&h](std::int64_t value) { h.mix(value); };
  mix(p.world_size);
  mix(p.max_tokens_per_rank);
  mix(static_cast<std::int64_t>(p.lengths.size()));
  for (const auto l : p.lengths)
    mix(l);
  mix(static_cast<std::int64_t>(p.microbatches.size()));
  for (const auto& mb : p.microbatches) {
    mix(static_cast<std::int64_t>(mb.groups.size()));
    for (const auto& g : mb.groups) {
      mix(g.first_rank);
      mix(g.cp);
      mix(static_cast<std::int64_t>(g.samples.size()));
      for (const auto s : g.samples)
        mix(s);
    }
  }
  return h.value();
}

} // namespace dcpp
