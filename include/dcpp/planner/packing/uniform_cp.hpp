// uniform_cp: verl's rule, one CP size per micro-batch chosen by its longest sample.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/util/indexed_heap.hpp"

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
    // Each micro-batch is offered every remaining sample in order; `rest` skips the samples
    // longer than the roomiest group could hold (they would wait), which changes nothing and
    // keeps a batch of many micro-batches near-linear. `widest` lists the positions by smallest
    // CP size, largest first (stable), so the largest size left is the first not yet placed.
    detail::remaining_samples rest(pr, detail::flatten(buckets));
    std::vector<std::size_t> widest(rest.size());
    for (std::size_t k = 0; k < widest.size(); ++k)
      widest[k] = k;
    std::stable_sort(widest.begin(), widest.end(), [&](std::size_t x, std::size_t y) {
      return pr.min_cp_of[static_cast<std::size_t>(rest.sample(x))] >
             pr.min_cp_of[static_cast<std::size_t>(rest.sample(y))];
    });
    std::size_t next_widest = 0;
    std::vector<detail::microbatch_state> mbs;
    while (!rest.empty()) {
      while (rest.taken(widest[next_widest]))
        ++next_widest;
      const std::int32_t cp =
          pr.min_cp_of[static_cast<std::size_t>(rest.sample(widest[next_widest]))];
      detail::microbatch_state mb(o.world_size);
      while (const auto block = mb.free_block(o, cp))
        mb.open(*block, cp);
      // the token room each group has left, most first: the roomiest sets what can still fit
      detail::indexed_heap<std::int64_t> room;
      for (std::size_t g = 0; g < mb.groups().size(); ++g)
        room.set(-o.max_tokens_per_rank, static_cast<std::int32_t>(g));
      const auto reach = [&] {
        return room.size() == 0 ? -1 : detail::longest_fitting(o, -room.top()->first, cp);
      };
      std::int64_t limit = reach();
      for (std::size_t k = rest.next(0, limit); k != rest.npos; k = rest.next(k + 1, limit)) {
        const std::int32_t sample = rest.sample(k);
        const auto s = static_cast<std::size_t>(sample);
        const std::int64_t tokens = pr.rank_tokens(s, cp);
        std::int32_t best = -1;
        const auto& groups = mb.groups();
        for (std::size_t g = 0; g < groups.size(); ++g)
          if (groups[g].tokens + tokens <= o.max_tokens_per_rank &&
              (best < 0 || groups[g].load < groups[static_cast<std::size_t>(best)].load))
            best = static_cast<std::int32_t>(g);
        if (best < 0)
          continue; // waits for a later micro-batch
        mb.add(best, sample, tokens, sample_cost(pr, estimator, s, cp));
        rest.remove(k);
        room.set(mb.groups()[static_cast<std::size_t>(best)].tokens - o.max_tokens_per_rank, best);
        limit = reach();
      }
      mbs.push_back(std::move(mb));
    }
    detail::split_to_multiple(mbs, o.microbatch_multiple, pr, estimator, /*grow=*/false);
    return detail::to_plan(pr, name, mbs);
  }
};

//! uniform_cp with the default bucketing (by_cp_size).
using uniform_cp = uniform_cp_with<>;

} // namespace dcpp
