// uniform_cp: verl's rule, one CP size per micro-batch chosen by its longest sample.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "dcpp/planner/packing.hpp"

namespace dcpp {

//! Micro-batch after micro-batch: the CP size is the smallest legal one for the longest
//! remaining sample; the world is cut into as many groups of that size as fit; every remaining
//! sample (longest first) joins the least-loaded group with token room, or waits for the next
//! micro-batch. Groups of one micro-batch all have the same CP size.
template <bucketing_policy Bucketing = by_cp_size>
struct uniform_cp_with {
  static constexpr std::string_view name = "uniform_cp";

  //! Samples taken in `bucketing`'s order (nothing but the order matters).
  [[no_unique_address]] Bucketing bucketing{};

  template <workload_estimator Estimator>
  plan pack(const problem& pr, const Estimator& estimator) const {
    return pack_in_order(pr, estimator, make_buckets(bucketing, pr, estimator));
  }
  //! `pack` with the samples in the order of `buckets` (every sample exactly once).
  template <workload_estimator Estimator>
  plan pack_in_order(const problem& pr, const Estimator& estimator,
                     const bucket_list& buckets) const {
    const plan_options& o = pr.options;
    std::vector<std::int32_t> remaining = detail::flatten(buckets);
    std::vector<detail::microbatch_state> mbs;
    std::vector<std::int32_t> leftovers;
    while (!remaining.empty()) {
      std::int32_t cp = 0;
      for (const std::int32_t s : remaining)
        cp = std::max(cp, pr.min_cp_of[static_cast<std::size_t>(s)]);
      detail::microbatch_state mb(o.world_size);
      while (const auto block = mb.free_block(o, cp))
        mb.open(*block, cp);
      leftovers.clear();
      for (const std::int32_t sample : remaining) {
        const auto s = static_cast<std::size_t>(sample);
        const std::int64_t tokens = pr.rank_tokens(s, cp);
        std::int32_t best = -1;
        const auto& groups = mb.groups();
        for (std::size_t g = 0; g < groups.size(); ++g)
          if (groups[g].tokens + tokens <= o.max_tokens_per_rank &&
              (best < 0 || groups[g].load < groups[static_cast<std::size_t>(best)].load))
            best = static_cast<std::int32_t>(g);
        if (best < 0) {
          leftovers.push_back(sample);
          continue;
        }
        mb.add(best, sample, tokens, sample_cost(pr, estimator, s, cp));
      }
      mbs.push_back(std::move(mb));
      remaining.swap(leftovers);
    }
    detail::split_to_multiple(mbs, o.microbatch_multiple, pr, estimator, /*grow=*/false);
    return detail::to_plan(pr, name, mbs);
  }
};

//! uniform_cp with the default bucketing (by_cp_size).
using uniform_cp = uniform_cp_with<>;

} // namespace dcpp
