// megatron_greedy: the behaviour of Megatron-LM's dynamic-CP scheduler, without its defects.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/util/indexed_heap.hpp"

namespace dcpp {

namespace detail {

//! Where megatron_greedy puts a sample: an existing group, or a new group of size `cp` on free
//! ranks (`fresh`); neither where it waits for a later micro-batch.
struct megatron_choice {
  double projected = 0;
  std::int32_t group = -1;
  bool fresh = false;
  std::int32_t cp = 0;

  [[nodiscard]] bool found() const noexcept { return group >= 0 || fresh; }
  //! Takes the offer where it is within `cap` and better: a lower projected maximum, then a
  //! smaller CP size, then an existing group (lowest index) before a new one.
  void offer(double p, std::int32_t c, bool f, std::int32_t g, double cap) noexcept {
    if (p > cap)
      return;
    const bool better = !found()         ? true
                        : p != projected ? p < projected
                        : c != cp        ? c < cp
                        : f != fresh     ? !f
                                         : g < group;
    if (better)
      *this = {p, f ? -1 : g, f, c};
  }
};

//! Sample `s`'s place in `mb` (maximum load `current_max`, load cap `cap`): the least projected
//! maximum over every existing group of a legal size with token room and every new group on free
//! ranks; ties go to the smaller CP size, then to an existing group (lowest index) before a new
//! one: the first minimum in the order "per size ascending: its groups, then a new group",
//! without a pass over the groups per size (which made contiguous worlds quadratic).
template <workload_estimator Estimator>
megatron_choice megatron_place(const problem& pr, const Estimator& estimator,
                               const microbatch_state& mb, std::size_t s, double current_max,
                               double cap) {
  const plan_options& o = pr.options;
  const std::int32_t min_cp = pr.min_cp_of[s];
  megatron_choice best;
  const auto& groups = mb.groups();
  // the sample's tokens and cost per group size, looked up once per run of equal sizes
  std::int32_t seen_cp = -1;
  std::int64_t room_needed = 0;
  double cost = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::int32_t cp = groups[g].cp;
    if (cp < min_cp)
      continue; // closed groups have cp 0
    if (cp != seen_cp) {
      seen_cp = cp;
      room_needed = o.max_tokens_per_rank - pr.rank_tokens(s, cp);
      cost = sample_cost(pr, estimator, s, cp);
    }
    if (groups[g].tokens > room_needed)
      continue;
    best.offer(std::max(current_max, groups[g].load + cost), cp, false,
               static_cast<std::int32_t>(g), cap);
  }
  if (mb.free_ranks() < min_cp)
    return best;
  // a new group of size cp fits on free ranks: for contiguous groups, iff the longest free run
  // holds cp ranks (one pass); aligned sizes are few, each looked up
  const std::int32_t run = o.group_topology == topology::contiguous ? mb.longest_free_run() : 0;
  for (const std::int32_t cp : pr.cp_sizes) {
    if (cp < min_cp)
      continue;
    if (cp > mb.free_ranks())
      break;
    if (o.group_topology == topology::contiguous ? cp > run : !mb.free_block(o, cp).has_value())
      continue;
    const double new_cost = sample_cost(pr, estimator, s, cp);
    best.offer(std::max(current_max, new_cost), cp, true, 0, cap);
    // the least any choice projects, at the smallest size left: no larger size wins (contiguous
    // worlds have a size per rank count, and this loop visited them all)
    if (new_cost <= current_max)
      break;
  }
  return best;
}

} // namespace detail

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
    // Each micro-batch is offered every remaining sample in order; one that cannot be placed
    // waits for the next. `rest` skips the samples longer than any group's token room or any
    // new group on the free ranks could hold (they would wait), which changes nothing and keeps
    // a batch of many micro-batches near-linear.
    detail::remaining_samples rest(pr, detail::flatten(buckets));
    std::vector<detail::microbatch_state> mbs;
    while (!rest.empty()) {
      detail::microbatch_state mb(o.world_size);
      const std::size_t front = rest.next(0, std::numeric_limits<std::int64_t>::max());
      const auto tall = static_cast<std::size_t>(rest.sample(front));
      {
        const std::int32_t cp = pr.min_cp_of[tall];
        const std::int32_t g = mb.open(mb.free_block(o, cp).value(), cp);
        mb.add(g, rest.sample(front), pr.rank_tokens(tall, cp),
               sample_cost(pr, estimator, tall, cp));
        rest.remove(front);
      }
      // loads only grow while the micro-batch fills: its maximum is kept, not searched
      double current_max = mb.max_load();
      const double cap = current_max /
                         static_cast<double>(pr.rank_tokens(tall, pr.min_cp_of[tall])) *
                         static_cast<double>(o.max_tokens_per_rank) * (1.0 + cap_slack);
      // the longest sample each group's token room could still hold, most first
      detail::indexed_heap<std::int64_t> group_reach;
      const auto reach_of = [&](std::size_t g) {
        const auto& grp = mb.groups()[g];
        group_reach.set(-detail::longest_fitting(o, o.max_tokens_per_rank - grp.tokens, grp.cp),
                        static_cast<std::int32_t>(g));
      };
      const auto reach = [&] { // the longest sample any choice could still hold
        return std::max(detail::longest_fitting(o, o.max_tokens_per_rank, mb.free_ranks()),
                        -group_reach.top()->first);
      };
      reach_of(0);
      std::int64_t limit = reach();
      for (std::size_t k = rest.next(front + 1, limit); k != rest.npos;
           k = rest.next(k + 1, limit)) {
        const std::int32_t sample = rest.sample(k);
        const auto s = static_cast<std::size_t>(sample);
        const detail::megatron_choice best =
            detail::megatron_place(pr, estimator, mb, s, current_max, cap);
        if (!best.found())
          continue; // waits for a later micro-batch
        const std::int32_t best_cp = best.cp;
        const std::int32_t g =
            best.group >= 0 ? best.group : mb.open(mb.free_block(o, best_cp).value(), best_cp);
        mb.add(g, sample, pr.rank_tokens(s, best_cp), sample_cost(pr, estimator, s, best_cp));
        rest.remove(k);
        current_max = std::max(current_max, mb.groups()[static_cast<std::size_t>(g)].load);
        reach_of(static_cast<std::size_t>(g));
        limit = reach();
      }
      mb.grow_into_idle_ranks(pr, estimator);
      mbs.push_back(std::move(mb));
    }
    detail::split_to_multiple(mbs, o.microbatch_multiple, pr, estimator, /*grow=*/true);
    return detail::to_plan(pr, name, mbs);
  }
};

//! megatron_greedy with the default bucketing (by_cp_size).
using megatron_greedy = megatron_greedy_with<>;

} // namespace dcpp
