// balanced: dcpp's packing policy, a portfolio. Constructions build rounds (each a header of
// balanced/), the local search improves each result, the fastest plan within the micro-batch
// allowance is kept.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "dcpp/planner/bounds/gap.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/bisected.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/exchange.hpp"
#include "dcpp/planner/packing/balanced/levelled.hpp"
#include "dcpp/planner/packing/balanced/local_search.hpp"
#include "dcpp/planner/packing/balanced/portfolio.hpp"
#include "dcpp/planner/packing/balanced/targeted.hpp"
#include "dcpp/planner/packing/balanced/tiled.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"
#include "dcpp/planner/packing/static_cp.hpp"

namespace dcpp {

//! dcpp's own packing policy: a portfolio of constructions, each result improved by the local
//! search, the best kept (docs/policies.md tells the whole story).
//! * CP size per sample: the legal size with the least rank area `cp x cost`.
//! * Micro-batches: at most the token lower bound plus `extra_microbatches` (default: as many
//!   again, `tuning.extra_rounds_divisor`), or the megatron construction's count if larger; every
//!   round costs the micro-batch overhead (`microbatch_overhead(problem, estimator)`), so more
//!   rounds win only where they lower the step time by more than they cost.
//! * Steps: the megatron construction first (up to `tuning.megatron_limit`), then
//!   `balanced_steps(tuning)`; a step runs when its construction is selected and the batch is
//!   within its limit. A result over the allowed rounds, or `tuning.improve_within` slower than
//!   the best so far, is dropped; the others go through the local search.
//! * Fallbacks: when no selected construction yields a plan, the megatron plan (improved) is the
//!   result; past the megatron limit the levelled construction always runs, and if it needs more
//!   rounds than allowed, megatron_greedy's count becomes the bound after all.
//! * Tiles of ranks traded between the best plan's rounds (`detail::exchange_tiles`,
//!   `tuning.tile_exchange_sweeps`) where that lowers the step time: before the final search and
//!   last of all.
//! Where the megatron construction runs and is selected, a `balanced` plan is never slower than
//! `megatron_greedy`'s under the same estimator.
template <bucketing_policy Bucketing = by_cp_size>
struct balanced_with {
  static constexpr std::string_view name = "balanced";
  using bucketing_type = Bucketing;
  //! Rounds allowed beyond the token lower bound, in micro-batch multiples (a cap: rounds are
  //! taken only where they pay for their overhead); -1: 1/tuning.extra_rounds_divisor of the
  //! token minimum (as many again), at least one multiple.
  std::int32_t extra_microbatches = -1;
  //! Which constructions' plans compete (bits). The megatron construction runs within its limit
  //! whatever the bits, to bound the rounds.
  std::uint32_t constructions = 255;
  static constexpr std::uint32_t construct_megatron = 1;
  static constexpr std::uint32_t construct_levelled = 2;
  static constexpr std::uint32_t construct_targeted = 4;
  static constexpr std::uint32_t construct_static = 8;
  static constexpr std::uint32_t construct_chunked = 16;
  static constexpr std::uint32_t construct_bisected = 32;
  static constexpr std::uint32_t construct_sized = 64;
  static constexpr std::uint32_t construct_tied = 128;
  balanced_tuning tuning{};

  //! The order of the megatron, static and targeted constructions' samples. The buckets are
  //! made only where one of those runs (not past the limits, but for the megatron fallback).
  [[no_unique_address]] Bucketing bucketing{};

  [[nodiscard]] bool selected(balanced_construction c) const noexcept {
    return (constructions & (1u << static_cast<unsigned>(c))) != 0;
  }

  //! The tuning's own check (`balanced_tuning::check`): the planner runs it before packing.
  [[nodiscard]] status check(const problem&) const { return tuning.check(); }

  template <workload_estimator Estimator>
  plan pack(const problem& pr, const Estimator& estimator) const {
    return pack_with(pr, estimator, true);
  }

private:
  template <class, class>
  friend class detail::balanced_run;
  template <class, class>
  friend class detail::balanced_state;

  //! `pack`; `exchange`: with the tile exchange. The packing of the samples the chunked and
  //! bisected constructions leave goes without it: there it left some plans slower than
  //! without it, as the outer steps started from other plans.
  //! The aligned run in a contiguous world has it, so that a contiguous plan is never slower
  //! than the aligned one.
  template <workload_estimator Estimator>
  plan pack_with(const problem& pr, const Estimator& estimator, bool exchange) const;

  template <workload_estimator Estimator>
  std::optional<plan> chunked_plan(const problem& pr, const Estimator& estimator,
                                   const detail::gap_class& runs) const;
  template <workload_estimator Estimator>
  std::optional<detail::assignment<Estimator>>
  bisected_plan(const problem& pr, const Estimator& estimator,
                const detail::cost_rows<Estimator>& costs, std::size_t allowed) const;
  template <workload_estimator Estimator>
  std::vector<plan_microbatch> pack_apart(const problem& pr, const Estimator& estimator,
                                          const std::vector<bool>& placed) const;
};

//! balanced with the default bucketing (by_cp_size).
using balanced = balanced_with<>;

template <bucketing_policy Bucketing>
template <workload_estimator Estimator>
plan balanced_with<Bucketing>::pack_with(const problem& pr, const Estimator& estimator,
                                         bool exchange) const {
  throw_if_failed(tuning.check());
  return detail::balanced_run<balanced_with, Estimator>(*this, pr, estimator, exchange).run();
}

//! The chunked construction for one class: the members of each run of its gap term
//! (`detail::gap_class`) on groups of the class's smallest size, in as many rounds as the world
//! needs for them (runs halved where that makes the rounds a multiple of the micro-batch
//! multiple; none where it cannot), then the other samples packed by this policy without this
//! construction (at the batch's micro-batch overhead), their rounds after. Where the gap term's
//! rounds are the best dealing of the class (runs of different lengths where the other
//! constructions deal the class evenly), the local search then fills the runs' free ranks from
//! the other rounds.
template <bucketing_policy Bucketing>
template <workload_estimator Estimator>
std::optional<plan> balanced_with<Bucketing>::chunked_plan(const problem& pr,
                                                           const Estimator& estimator,
                                                           const detail::gap_class& runs) const {
  const plan_options& o = pr.options;
  // the fastest run first: the local search, which sweeps the rounds in order, then fills the
  // runs from the other rounds better than from the slowest run first
  const auto per_round = static_cast<std::size_t>(o.world_size / runs.smallest);
  std::vector<std::vector<std::int32_t>> rounds;
  for (auto run = runs.runs.rbegin(); run != runs.runs.rend(); ++run)
    for (std::size_t at = 0; at < run->size(); at += per_round)
      rounds.emplace_back(run->begin() + static_cast<std::ptrdiff_t>(at),
                          run->begin() +
                              static_cast<std::ptrdiff_t>(std::min(run->size(), at + per_round)));
  const auto multiple = static_cast<std::size_t>(o.microbatch_multiple);
  while (rounds.size() % multiple != 0) {
    const auto fullest =
        std::max_element(rounds.begin(), rounds.end(),
                         [](const auto& a, const auto& b) { return a.size() < b.size(); });
    if (fullest->size() < 2)
      return std::nullopt;
    std::vector<std::int32_t> half(
        fullest->begin() + static_cast<std::ptrdiff_t>(fullest->size() / 2), fullest->end());
    fullest->resize(fullest->size() / 2);
    rounds.insert(fullest + 1, std::move(half));
  }
  plan p;
  p.world_size = o.world_size;
  p.max_tokens_per_rank = o.max_tokens_per_rank;
  p.lengths = pr.lengths;
  std::vector<bool> placed(pr.size(), false);
  for (const std::vector<std::int32_t>& members : rounds) {
    plan_microbatch& mb = p.microbatches.emplace_back();
    for (std::size_t k = 0; k < members.size(); ++k) {
      const auto rank = static_cast<std::int32_t>(k) * runs.smallest;
      mb.groups.push_back({rank, runs.smallest, {members[k]}, 0, 0.0});
      placed[static_cast<std::size_t>(members[k])] = true;
    }
  }
  for (plan_microbatch& mb : pack_apart(pr, estimator, placed))
    p.microbatches.push_back(std::move(mb));
  return p;
}

//! The rounds of the samples not `placed`, packed by this policy as a batch of their own (at the
//! batch's micro-batch overhead) without the constructions that call this, in batch sample ids.
template <bucketing_policy Bucketing>
template <workload_estimator Estimator>
std::vector<plan_microbatch>
balanced_with<Bucketing>::pack_apart(const problem& pr, const Estimator& estimator,
                                     const std::vector<bool>& placed) const {
  std::vector<std::int64_t> rest;
  std::vector<std::int32_t> id_of; // the rest's sample ids in the batch
  for (std::size_t i = 0; i < pr.size(); ++i)
    if (!placed[i]) {
      rest.push_back(pr.lengths[i]);
      id_of.push_back(static_cast<std::int32_t>(i));
    }
  if (rest.empty())
    return {};
  plan_options rest_options = pr.options;
  rest_options.microbatch_overhead = microbatch_overhead(pr, estimator);
  problem others = make_problem(rest_options, rest);
  if (!pr.cost_row.empty())
    tabulate_costs(others, estimator);
  balanced_with inner = *this;
  inner.constructions &= ~(construct_chunked | construct_bisected);
  inner.tuning.second_list = false;
  std::vector<plan_microbatch> rounds = inner.pack_with(others, estimator, false).microbatches;
  for (plan_microbatch& mb : rounds)
    for (plan_group& g : mb.groups)
      for (std::int32_t& s : g.samples)
        s = id_of[static_cast<std::size_t>(s)];
  return rounds;
}

//! The bisected construction's plan (balanced/bisected.hpp): the samples that need CP (a
//! smallest legal size of 2 or more; at most `tuning.bisected_samples`) in rounds of their own,
//! the other samples' rounds after them (packed once, `pack_apart`); of the round counts from
//! the fewest their tokens allow (at `tuning.bisected_fill` of the world's) to
//! `tuning.bisected_extra_rounds` micro-batch multiples more, within `allowed` rounds in all,
//! the plan that is fastest as it is.
template <bucketing_policy Bucketing>
template <workload_estimator Estimator>
std::optional<detail::assignment<Estimator>>
balanced_with<Bucketing>::bisected_plan(const problem& pr, const Estimator& estimator,
                                        const detail::cost_rows<Estimator>& costs,
                                        std::size_t allowed) const {
  const plan_options& o = pr.options;
  std::vector<std::int32_t> members;
  std::vector<bool> placed(pr.size(), false);
  double tokens = 0;
  for (std::size_t i = 0; i < pr.size(); ++i)
    if (pr.min_cp_of[i] >= 2) {
      members.push_back(static_cast<std::int32_t>(i));
      placed[i] = true;
      tokens += static_cast<double>(pr.lengths[i]);
    }
  const double room = tuning.bisected_fill * static_cast<double>(o.max_tokens_per_rank) *
                      static_cast<double>(o.world_size);
  const auto fewest = round_up<std::int64_t>(
      std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(tokens / room))),
      o.microbatch_multiple);
  if (members.empty() ||
      members.size() > std::min<std::size_t>(static_cast<std::size_t>(tuning.bisected_samples),
                                             detail::bisector<Estimator>::most_members) ||
      static_cast<double>(members.size()) >
          tuning.bisected_round_samples * static_cast<double>(fewest))
    return std::nullopt;
  const std::vector<plan_microbatch> rest = pack_apart(pr, estimator, placed);
  const detail::bisector<Estimator> halving(pr, estimator, members, tuning.bisected_exhaustive,
                                            tuning.bisected_splits);
  // the search's work in proportion to the batch's size
  const detail::bisected_search search{
      .fill = tuning.bisected_fill,
      .steps = tuning.bisected_steps,
      .trials = tuning.bisected_trials,
      .layouts = static_cast<std::size_t>(tuning.bisected_layouts),
      .work = static_cast<std::int64_t>(
          std::min(9e18, tuning.bisected_work * static_cast<double>(pr.size()) * o.world_size))};
  // the other samples, and their least rank areas' sum: what the ranks a layout leaves free
  // can hold (`detail::reserved_blocks`)
  std::vector<std::int32_t> others;
  double others_area = 0;
  for (std::size_t i = 0; i < pr.size(); ++i)
    if (!placed[i]) {
      others.push_back(static_cast<std::int32_t>(i));
      others_area += detail::least_of_sample(pr, estimator, i).area;
    }
  std::optional<detail::assignment<Estimator>> fastest;
  const auto take = [&](const std::vector<plan_microbatch>& rounds) {
    if (rounds.size() > allowed)
      return;
    detail::assignment<Estimator> a =
        detail::assignment<Estimator>::from_microbatches(costs, rounds);
    if (!fastest || a.step_time() < fastest->step_time())
      fastest = std::move(a);
  };
  // the round count whose rounds, with ranks left free, promise the least (each such plan
  // packs the samples the free ranks do not take once more: 1.4-1.8x the construction's work
  // were it built at every count)
  struct reserve_choice {
    double estimate = std::numeric_limits<double>::infinity();
    std::vector<typename detail::bisector<Estimator>::set> dealt;
    std::vector<std::int32_t> blocks;
    std::vector<double> times; // each round's time on its block
  } reserve;
  for (std::int64_t k = fewest;
       k <= fewest + std::int64_t{tuning.bisected_extra_rounds} * o.microbatch_multiple &&
       static_cast<std::size_t>(k) <= members.size() && static_cast<std::size_t>(k) <= allowed;
       k += o.microbatch_multiple) {
    auto dealt = detail::deal_rounds(pr, static_cast<std::int32_t>(k), search, halving);
    if (!dealt)
      continue;
    // the rounds on the whole world, the others' rounds after them
    const std::vector<std::int32_t> whole(dealt->size(), o.world_size);
    std::vector<plan_microbatch> rounds = detail::lay_out<Estimator>(*dealt, whole, halving);
    rounds.insert(rounds.end(), rest.begin(), rest.end());
    take(rounds);
    if (!tuning.bisected_reserve || others.empty())
      continue;
    detail::reserved_layout r =
        detail::reserved_blocks<Estimator>(*dealt, others_area, o.world_size, halving);
    if (const double e = r.objective + static_cast<double>(k) * costs.overhead();
        e < reserve.estimate)
      reserve = {e, std::move(*dealt), std::move(r.blocks), std::move(r.times)};
  }
  // that count's rounds on blocks that leave ranks free, the others first into those, the rest
  // of them packed apart
  if (reserve.dealt.empty())
    return fastest;
  std::vector<plan_microbatch> reserved =
      detail::lay_out<Estimator>(reserve.dealt, reserve.blocks, halving);
  const std::vector<std::int32_t> left =
      detail::fill_free_ranks(pr, estimator, reserved, reserve.times, others);
  if (left.size() == others.size())
    return fastest; // the free ranks took none of them: the rounds above, or slower
  if (!left.empty()) {
    std::vector<bool> out_of_left(pr.size(), true);
    for (const std::int32_t s : left)
      out_of_left[static_cast<std::size_t>(s)] = false;
    const std::vector<plan_microbatch> more = pack_apart(pr, estimator, out_of_left);
    reserved.insert(reserved.end(), more.begin(), more.end());
  }
  take(reserved);
  return fastest;
}

} // namespace dcpp
