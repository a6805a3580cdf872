// static_cp: one fixed CP size for every sample, packed to the token budget.
#pragma once

#include <cstdint>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dcpp/planner/packing.hpp"

namespace dcpp {

//! Static context parallelism, the common baseline: every sample runs on a group of `cp` ranks
//! (0: the smallest legal size that fits the longest sample), the world is `world_size / cp`
//! fixed groups, and samples (heaviest first) go to the least-loaded (micro-batch, group) slot
//! with token room. The micro-batch count starts at the token lower bound and grows only when a
//! sample fits nowhere.
template <bucketing_policy Bucketing = by_cp_size>
struct static_cp_with {
  static constexpr std::string_view name = "static_cp";
  std::int32_t cp = 0;

  [[nodiscard]] std::int32_t resolve(const problem& pr) const {
    if (cp > 0)
      return cp;
    std::int32_t c = 1;
    for (const auto m : pr.min_cp_of)
      c = std::max(c, m);
    return c;
  }

  [[nodiscard]] status check(const problem& pr) const {
    const std::int32_t c = resolve(pr);
    const plan_options& o = pr.options;
    if (std::find(pr.cp_sizes.begin(), pr.cp_sizes.end(), c) == pr.cp_sizes.end())
      return status::failure(status_code::invalid_option,
                             fmt::format("static cp = {} is not a legal group size ({} topology, "
                                         "min_cp = {}, max_cp = {}, world_size = {})",
                                         c, to_string(o.group_topology), o.min_cp,
                                         o.effective_max_cp(), o.world_size));
    if (o.world_size % c != 0)
      return status::failure(
          status_code::world_not_divisible,
          fmt::format("world_size = {} is not a multiple of static cp = {}", o.world_size, c));
    for (std::size_t i = 0; i < pr.size(); ++i)
      if (pr.rank_tokens(i, c) > o.max_tokens_per_rank)
        return status::failure(status_code::sample_too_long,
                               fmt::format("sample {}: length = {} needs {} tokens per rank on "
                                           "static cp = {}, over max_tokens_per_rank = {}",
                                           i, pr.lengths[i], pr.rank_tokens(i, c), c,
                                           o.max_tokens_per_rank),
                               static_cast<std::int64_t>(i));
    return status::success();
  }

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
    throw_if_failed(check(pr));
    const plan_options& o = pr.options;
    const std::int32_t c = resolve(pr);
    const std::int32_t groups_per_mb = o.world_size / c;
    // heaviest first: the bucket order, made stable by descending cost
    std::vector<std::int32_t> order = detail::flatten(buckets);
    std::vector<double> cost(pr.size());
    std::int64_t rank_tokens = 0;
    for (std::size_t i = 0; i < pr.size(); ++i) {
      cost[i] = sample_cost(pr, estimator, i, c);
      rank_tokens += pr.rank_tokens(i, c);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      return cost[static_cast<std::size_t>(a)] > cost[static_cast<std::size_t>(b)];
    });
    const std::int64_t capacity = std::int64_t{groups_per_mb} * o.max_tokens_per_rank;
    auto k = static_cast<std::int32_t>(std::max<std::int64_t>(1, ceil_div(rank_tokens, capacity)));
    k = round_up(k, o.microbatch_multiple);

    struct slot {
      double load = 0;
      std::int64_t tokens = 0;
      std::vector<std::int32_t> samples;
    };
    std::vector<slot> slots;
    // The choice: among the `tries` least-loaded slots (by load, then id), the first with room;
    // else the roomiest slot (by tokens, then id) if it has room; else more rounds. Up to `tries`
    // slots the least-loaded slot with room is found by a scan (the same choice: every slot is
    // among the first `tries`, and the roomiest has room only if some slot has); past that, two
    // ordered sets keep the slots by load and by tokens.
    constexpr std::size_t tries = 64;
    std::set<std::pair<double, std::int32_t>> by_load;         // (load, slot)
    std::set<std::pair<std::int64_t, std::int32_t>> by_tokens; // (tokens, slot): most room first
    bool indexed = false;
    auto add_microbatches = [&](std::int32_t count) {
      slots.resize(slots.size() + static_cast<std::size_t>(count) * groups_per_mb);
      if (!indexed && slots.size() > tries) {
        indexed = true;
        for (std::size_t i = 0; i < slots.size(); ++i) {
          by_load.emplace(slots[i].load, static_cast<std::int32_t>(i));
          by_tokens.emplace(slots[i].tokens, static_cast<std::int32_t>(i));
        }
      } else if (indexed) {
        for (std::size_t i = slots.size() - static_cast<std::size_t>(count) * groups_per_mb;
             i < slots.size(); ++i) {
          by_load.emplace(0.0, static_cast<std::int32_t>(i));
          by_tokens.emplace(0, static_cast<std::int32_t>(i));
        }
      }
    };
    const auto choose = [&](std::int64_t tokens) {
      const std::int64_t room = o.max_tokens_per_rank - tokens;
      if (!indexed) {
        std::int32_t chosen = -1;
        for (std::size_t i = 0; i < slots.size(); ++i)
          if (slots[i].tokens <= room &&
              (chosen < 0 || slots[i].load < slots[static_cast<std::size_t>(chosen)].load))
            chosen = static_cast<std::int32_t>(i);
        return chosen;
      }
      std::size_t tried = 0;
      for (auto it = by_load.begin(); it != by_load.end() && tried < tries; ++it, ++tried)
        if (slots[static_cast<std::size_t>(it->second)].tokens <= room)
          return it->second;
      return by_tokens.begin()->first <= room ? by_tokens.begin()->second : -1;
    };
    add_microbatches(k);
    for (const std::int32_t sample : order) {
      const auto s = static_cast<std::size_t>(sample);
      const std::int64_t tokens = pr.rank_tokens(s, c);
      std::int32_t chosen = choose(tokens);
      while (chosen < 0) {
        add_microbatches(o.microbatch_multiple); // fits nowhere: more rounds
        chosen = choose(tokens);
      }
      auto& sl = slots[static_cast<std::size_t>(chosen)];
      if (indexed) {
        by_load.erase({sl.load, chosen});
        by_tokens.erase({sl.tokens, chosen});
      }
      sl.samples.push_back(sample);
      sl.tokens += tokens;
      sl.load += cost[s];
      if (indexed) {
        by_load.emplace(sl.load, chosen);
        by_tokens.emplace(sl.tokens, chosen);
      }
    }
    plan p = detail::make_plan_shell(pr, name);
    p.microbatches.resize(slots.size() / static_cast<std::size_t>(groups_per_mb));
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].samples.empty())
        continue;
      const auto g = static_cast<std::int32_t>(i % static_cast<std::size_t>(groups_per_mb));
      p.microbatches[i / static_cast<std::size_t>(groups_per_mb)].groups.push_back(
          plan_group{g * c, c, std::move(slots[i].samples), 0, 0.0});
    }
    return p;
  }
};

//! static_cp with the default bucketing (by_cp_size).
using static_cp = static_cp_with<>;

} // namespace dcpp
