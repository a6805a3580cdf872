// megatron_greedy: the behaviour of Megatron-LM's dynamic-CP scheduler, without its defects.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "dcpp/planner/packing.hpp"

namespace dcpp {

//! Micro-batch after micro-batch, as Megatron-LM's `DefaultDynamicCPScheduler` does:
//! * the longest remaining sample opens a group of its smallest CP size on the first free
//!   legal ranks; it sets the cap: a rank full (`max_tokens_per_rank`) of tokens as costly per
//!   token as this sample's, plus 5% (Megatron's `tall * max_seq_len_per_rank`);
//! * every other remaining sample, longest first, goes where the projected micro-batch maximum
//!   is least: into an existing group of a legal CP size with token room, or a new group on free
//!   ranks, for each CP size from its smallest up; if every choice exceeds the cap it waits for
//!   a later micro-batch;
//! * idle ranks are then filled by growing the smallest groups to the next legal size.
//! Differences from the original, on purpose: groups are always legal for the topology (the
//! original may form CP16 on 24 ranks, for which it creates no communicator); no negative-index
//! wrap, no aliased per-rank lists, and the micro-batch multiple is met by splitting without
//! forcing samples off CP 1.
template <bucketing_policy Bucketing = by_cp_size>
struct megatron_greedy_with {
  static constexpr std::string_view name = "megatron_greedy";
  double cap_slack = 0.05; //!< Megatron's _DYNAMIC_CP_WORKLOAD_CAP_DELTA

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
      detail::microbatch_state mb(o.world_size);
      leftovers.clear();
      {
        const auto s = static_cast<std::size_t>(remaining.front());
        const std::int32_t cp = pr.min_cp_of[s];
        const std::int64_t tokens = pr.rank_tokens(s, cp);
        const double cost = sample_cost(pr, estimator, s, cp);
        const std::int32_t g = mb.open(mb.free_block(o, cp).value(), cp);
        mb.add(g, remaining.front(), tokens, cost);
      }
      const auto tall = static_cast<std::size_t>(remaining.front());
      const double cap = mb.max_load() /
                         static_cast<double>(pr.rank_tokens(tall, pr.min_cp_of[tall])) *
                         static_cast<double>(o.max_tokens_per_rank) * (1.0 + cap_slack);
      for (std::size_t k = 1; k < remaining.size(); ++k) {
        const std::int32_t sample = remaining[k];
        const auto s = static_cast<std::size_t>(sample);
        const double current_max = mb.max_load();
        const std::int32_t min_cp = pr.min_cp_of[s];
        // The least projected maximum over every existing group of a legal size with token
        // room and every new group on free ranks; ties go to the smaller CP size, then to an
        // existing group (lowest index) before a new one: the first minimum in the order "per
        // size ascending: its groups, then a new group", without a pass over the groups per
        // size (which made contiguous worlds quadratic: 1,024 sizes x 1,024 groups per sample).
        double best = 0;
        std::int32_t best_group = -1; // an existing group, or
        bool best_new = false;        // a new group of best_cp on free ranks
        std::int32_t best_cp = 0;
        const auto better = [&](double projected, std::int32_t cp, bool fresh, std::int32_t g) {
          if (projected > cap)
            return false;
          if (best_group < 0 && !best_new)
            return true;
          if (projected != best)
            return projected < best;
          if (cp != best_cp)
            return cp < best_cp;
          if (fresh != best_new)
            return !fresh;
          return g < best_group;
        };
        const auto& groups = mb.groups();
        for (std::size_t g = 0; g < groups.size(); ++g) {
          const std::int32_t cp = groups[g].cp;
          if (cp < min_cp || groups[g].tokens + pr.rank_tokens(s, cp) > o.max_tokens_per_rank)
            continue; // closed groups have cp 0
          const double projected =
              std::max(current_max, groups[g].load + sample_cost(pr, estimator, s, cp));
          if (better(projected, cp, false, static_cast<std::int32_t>(g)))
            best = projected, best_group = static_cast<std::int32_t>(g), best_new = false,
            best_cp = cp;
        }
        if (mb.free_ranks() >= min_cp) {
          // a new group of size cp fits on free ranks: for contiguous groups, iff the longest
          // free run holds cp ranks (one pass); aligned sizes are few, each looked up
          const std::int32_t run =
              o.group_topology == topology::contiguous ? mb.longest_free_run() : 0;
          for (const std::int32_t cp : pr.cp_sizes) {
            if (cp < min_cp)
              continue;
            if (cp > mb.free_ranks())
              break;
            if (o.group_topology == topology::contiguous ? cp > run
                                                         : !mb.free_block(o, cp).has_value())
              continue;
            const double cost = sample_cost(pr, estimator, s, cp);
            const double projected = std::max(current_max, cost);
            if (better(projected, cp, true, 0))
              best = projected, best_group = -1, best_new = true, best_cp = cp;
            // the least any choice projects, at the smallest size left: no larger size wins
            // (contiguous worlds have a size per rank count, and this loop visited them all)
            if (cost <= current_max)
              break;
          }
        }
        if (best_group < 0 && !best_new) {
          leftovers.push_back(sample);
          continue;
        }
        const std::int32_t g =
            best_group >= 0 ? best_group : mb.open(mb.free_block(o, best_cp).value(), best_cp);
        mb.add(g, sample, pr.rank_tokens(s, best_cp), sample_cost(pr, estimator, s, best_cp));
      }
      mb.grow_into_idle_ranks(pr, estimator);
      mbs.push_back(std::move(mb));
      remaining.swap(leftovers);
    }
    detail::split_to_multiple(mbs, o.microbatch_multiple, pr, estimator, /*grow=*/true);
    return detail::to_plan(pr, name, mbs);
  }
};

//! megatron_greedy with the default bucketing (by_cp_size).
using megatron_greedy = megatron_greedy_with<>;

} // namespace dcpp
