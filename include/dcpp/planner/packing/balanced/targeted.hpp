// The targeted construction: the round count fixed, a per-rank target cost, samples placed
// one by one in the bucketing policy's order where they raise the step time least.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "dcpp/planner/bucketing.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/util/node_pool.hpp"
#include "dcpp/planner/util/sort.hpp"

namespace dcpp::detail {

//! The order the targeted construction places samples in: by bucket, then descending CP size,
//! then descending cost, then id.
[[nodiscard]] inline std::vector<std::int32_t> placement_order(const bucket_list& buckets,
                                                               const sample_sizes& sizes) {
  std::vector<std::int32_t> bucket_of(sizes.cp.size(), 0);
  for (std::size_t b = 0; b < buckets.size(); ++b)
    for (const auto s : buckets[b])
      bucket_of[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(b);
  std::vector<std::int32_t> order = flatten(buckets);
  sort_ids_by_key(order, [&](std::int32_t a) {
    const auto u = static_cast<std::size_t>(a);
    return std::tuple(bucket_of[u], -std::int64_t{sizes.cp[u]}, -sizes.cost[u]);
  });
  return order;
}

//! The targeted construction on `rounds` rounds: each sample of `order`, at its size in
//! `sizes`, goes (a) into the fullest group of its size that stays within `target`, else (b)
//! into a new group on the round with the most free ranks, else (c) into the group of any size
//! on its ladder that raises the step time least (the excess over its round's level, target or
//! current maximum, plus the extra rank area spread over the world). Nothing when a sample fits
//! nowhere.
template <class Estimator>
[[nodiscard]] std::optional<assignment<Estimator>>
targeted(const cost_rows<Estimator>& costs, sample_sizes sizes, double target, std::int32_t rounds,
         const std::vector<std::int32_t>& order, const balanced_tuning& tuning) {
  const problem& pr = costs.batch();
  const std::int64_t budget = costs.budget();
  const std::int32_t world = costs.world();
  const std::int32_t candidates = tuning.candidates_per_size;
  assignment<Estimator> a(costs, rounds, std::move(sizes));
  // per CP size: (load, group id), ascending; nodes from an arena (one per placement)
  using keyed = std::pair<double, std::int32_t>;
  node_arena arena;
  std::vector<std::set<keyed, std::less<keyed>, node_allocator<keyed>>> by_load;
  by_load.reserve(costs.sizes());
  for (std::size_t l = 0; l < costs.sizes(); ++l)
    by_load.emplace_back(node_allocator<keyed>(arena));
  const auto add = [&](std::int32_t id, std::int32_t s) {
    auto& index = by_load[costs.size_index(a.group_at(id).cp)];
    index.erase({a.group_at(id).load, id});
    a.insert(id, s);
    index.emplace(a.group_at(id).load, id);
  };
  for (const std::int32_t s : order) {
    const std::int32_t c = a.cp_of(s);
    const double w = a.cost_of(s);
    const std::int64_t t = costs.tokens(s, c);
    bool placed = false;
    // (a) best fit
    {
      auto& index = by_load[costs.size_index(c)];
      auto it = index.upper_bound({target - w, std::numeric_limits<std::int32_t>::max()});
      for (std::int32_t tries = 0; it != index.begin() && tries < candidates; ++tries) {
        --it;
        if (a.group_at(it->second).tokens + t <= budget) {
          add(it->second, s);
          placed = true;
          break;
        }
      }
    }
    // (b) a new group on the roomiest round
    if (!placed)
      a.by_free_ranks([&](std::int32_t free, std::int32_t m) {
        if (free < c)
          return true;
        if (const auto first = a.free_block(m, c)) {
          const std::int32_t id = a.open(m, *first, c);
          by_load[costs.size_index(c)].emplace(0.0, id);
          add(id, s);
          placed = true;
          return true;
        }
        return false;
      });
    if (placed)
      continue;
    // (c) the least rise of the step time
    const double base_area = w * c;
    double best = std::numeric_limits<double>::infinity();
    std::int32_t best_id = -1;
    for (const std::int32_t c2 : ladder(pr, s)) {
      const double w2 = c2 == c ? w : costs.cost(s, c2);
      const std::int64_t t2 = costs.tokens(s, c2);
      const double inflation = std::max(0.0, w2 * c2 - base_area) / world;
      std::int32_t found = 0;
      for (const auto& [load, id] : by_load[costs.size_index(c2)]) {
        if (load + w2 - target + inflation >= best)
          break;
        const auto& h = a.group_at(id);
        if (h.tokens + t2 > budget)
          continue;
        const double level = std::max(target, a.max_load(a.round_of(id)));
        const double score = std::max(0.0, load + w2 - level) + inflation;
        if (score < best) {
          best = score;
          best_id = id;
        }
        if (++found >= candidates)
          break;
      }
    }
    if (best_id < 0)
      return std::nullopt;
    add(best_id, s);
  }
  return a;
}

//! The targeted construction at the fewest rounds that pack: from `k_min` rounds up in steps of
//! `multiple`, within `allowed`, the sizes of least area raised toward the per-rank target of
//! that count (`raise_toward_target`), placed in `placement_order`; nothing where no count packs.
template <class Estimator>
[[nodiscard]] std::optional<assignment<Estimator>>
targeted_at_fewest(const cost_rows<Estimator>& costs, const sample_sizes& least_area,
                   std::int32_t k_min, std::size_t allowed, std::int32_t multiple,
                   const bucket_list& buckets, const balanced_tuning& tuning) {
  for (std::int32_t k = k_min; static_cast<std::size_t>(k) <= allowed; k += multiple) {
    sample_sizes sizes = least_area;
    const double target = raise_toward_target(sizes, costs, k, tuning);
    const std::vector<std::int32_t> order = placement_order(buckets, sizes);
    if (auto a = targeted(costs, std::move(sizes), target, k, order, tuning))
      return a;
  }
  return std::nullopt;
}

} // namespace dcpp::detail
