// balanced: dcpp's packing policy. Several constructions of rounds, each improved by moves and
// swaps that lower the step time; the fastest plan within the micro-batch allowance is kept.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dcpp/planner/node_pool.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/indexed_heap.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"
#include "dcpp/planner/packing/static_cp.hpp"
#include "dcpp/planner/sort.hpp"

namespace dcpp {

namespace detail {
template <class Estimator>
class balanced_engine;
}

//! dcpp's own packing policy: several constructions, each improved by local search, the best
//! kept (docs/policies.md tells the whole story).
//! * CP size per sample: the legal size with the least rank-time area `cp * cost`.
//! * Constructions:
//!   - `levelled`: rounds built one after another from samples sorted by work per token, each
//!     filled to the token budget by longest-processing-time-first onto its groups, so that a
//!     round holds samples of similar work per token and its ranks end level; samples above the
//!     round's level spread over larger groups, paid from the token slack of the allowed rounds;
//!     below `levelled_variants_limit` built four times (larger groups at 5%, 0%, 10% more area,
//!     and at 0% with heavy samples kept out of each other's groups: `heavy_share`);
//!   - `targeted` (small batches): the micro-batch count fixed at the token lower bound, a
//!     target `T = area / (N*K)` per rank and round, samples costlier than T on larger groups,
//!     best fit into groups within T, new groups on the roomiest round, the least step-time
//!     increase for the rest;
//!   - `megatron`, `static` (small batches): the plans of `megatron_greedy` and `static_cp`.
//! * Improvement: the critical group of each round gives a sample away (to the group with the
//!   most slack under its round's maximum, or onto free ranks, at any legal CP size) or swaps it
//!   with a sample of another round, while that lowers the step time (`sum over rounds of max
//!   rank time`, plus the estimator's micro-batch overhead per round).
//! * Micro-batches: the token lower bound plus `extra_microbatches` (default: a quarter more
//!   when the estimator prices a micro-batch), or the `megatron` construction's count if
//!   larger. Where the `megatron` construction runs, a `balanced` plan is never slower than
//!   `megatron_greedy`'s under the same estimator.
struct balanced {
  static constexpr std::string_view name = "balanced";
  std::int32_t improvement_sweeps = 16;  //!< bound on sweeps over the rounds
  std::int32_t candidates_per_level = 8; //!< groups examined per CP size when placing a sample
  //! Groups examined per CP size for a move or swap; -1: 64 while samples x ranks is below
  //! `wide_search_limit`, else 8 (the wider search finds better moves, measured: 4 more of the
  //! 35 generated benchmark workloads reach 0.97, none worse, at 1.5-4x the planning time).
  std::int32_t improvement_candidates = -1;
  std::int64_t wide_search_limit = std::int64_t{1} << 18;
  //! Rounds allowed beyond the token lower bound; -1: a quarter more when the estimator has a
  //! micro-batch overhead, none otherwise.
  std::int32_t extra_microbatches = -1;
  //! Which constructions' plans compete (bits: `construct_megatron`, `construct_levelled`,
  //! `construct_targeted`, `construct_static`). Whatever the bits, the megatron construction runs
  //! where it bounds the rounds (samples x ranks <= `megatron_limit`), and its plan (improved) is
  //! the result when no selected construction packs the batch within the bound; past that limit
  //! the levelled one is that fallback.
  std::uint32_t constructions = 15;
  static constexpr std::uint32_t construct_megatron = 1;
  static constexpr std::uint32_t construct_levelled = 2;
  static constexpr std::uint32_t construct_targeted = 4;
  static constexpr std::uint32_t construct_static = 8;
  //! The megatron construction runs when samples x ranks is at most this.
  std::int64_t megatron_limit = std::int64_t{1} << 15;
  //! End a levelled round as soon as no sample left can join it (checked after long runs of
  //! misses) instead of scanning the rest: the same plans, faster where large groups hold the
  //! only room (false is there for the test that proves the plans equal).
  bool end_rounds_early = true;
  //! The levelled construction lets a sample join a larger group where it costs at most 5% more
  //! rank area. While samples x ranks is at most this, it also runs with 0% and 10% and the best
  //! plan is kept: which reach packs a batch best depends on its mix (measured on the benchmark's
  //! long-tail batches on 24 and 48 ranks and Pareto batches on 64: 0% lifts three of them to
  //! 0.97 and more, 10% a fourth; each alone loses elsewhere). Costs 1.5-4.5x planning time there.
  std::int64_t levelled_variants_limit = std::int64_t{1} << 17;
  //! A fourth levelled variant (below `levelled_variants_limit`, at the 0% reach) keeps heavy
  //! samples apart: a sample that costs more than `heavy_share` of its round's level joins no
  //! group of the round; it opens one on free ranks or waits for the next round. Stacked in one
  //! group, two heavy samples make it as slow as both together, and the round's other groups,
  //! full of tokens, cannot rise to match (measured: the benchmark's long_tail/48/s2 0.962 ->
  //! 0.993; shares 0.3-0.5 swept, 0.4 best on the mean of the 35 generated workloads). 0: off.
  double heavy_share = 0.4;

  template <workload_estimator Estimator>
  plan pack(const problem& pr, const Estimator& estimator, const bucket_list& buckets) const {
    return pack(pr, estimator, bucket_source(buckets));
  }
  //! Reads the buckets only where a construction uses them (megatron, targeted, static; past
  //! the limits only the megatron fallback): the planner then skips the bucketing.
  template <workload_estimator Estimator>
  plan pack(const problem& pr, const Estimator& estimator, const bucket_source& buckets) const {
    return detail::balanced_engine<Estimator>(pr, estimator, *this).run(buckets);
  }
};

namespace detail {

template <class Estimator>
class balanced_engine {
public:
  balanced_engine(const problem& pr, const Estimator& estimator, const balanced& policy)
      : pr_(pr), estimator_(estimator), policy_(policy), o_(pr.options),
        n_(static_cast<std::int32_t>(pr.size())), world_(pr.options.world_size),
        budget_(pr.options.max_tokens_per_rank),
        improve_candidates_(policy.improvement_candidates >= 0 ? policy.improvement_candidates
                            : std::int64_t{n_} * world_ < policy.wide_search_limit ? 64
                                                                                   : 8) {}

  plan run(const bucket_source& buckets) {
    choose_cp_sizes();
    const std::vector<std::int32_t> base_cp = cp_;
    const std::vector<double> base_cost = cost_;
    const std::int32_t k_min = initial_microbatches();

    // The megatron construction costs O(samples x groups) and bounds the rounds; past
    // `megatron_limit` (samples x ranks) the bound is the token minimum plus the extra rounds,
    // or what the levelled construction needs.
    const bool with_megatron = std::int64_t{n_} * world_ <= policy_.megatron_limit;
    const auto selected = [this](std::uint32_t bit) { return (policy_.constructions & bit) != 0; };
    plan best = with_megatron ? megatron_greedy{}.pack(pr_, estimator_, buckets) : plan{};
    // Rounds beyond the token minimum: `extra_microbatches`, or, when the estimator prices a
    // micro-batch (so that an extra round must pay for itself), up to a quarter more.
    std::int64_t extra = std::int64_t{policy_.extra_microbatches} * o_.microbatch_multiple;
    if (policy_.extra_microbatches < 0)
      extra =
          microbatch_overhead(estimator_) > 0
              ? round_up<std::int64_t>(std::max<std::int64_t>(1, ceil_div<std::int64_t>(k_min, 4)),
                                       o_.microbatch_multiple)
              : 0;
    std::size_t allowed = static_cast<std::size_t>(k_min + extra);
    double best_step = std::numeric_limits<double>::infinity();
    bool have_plan = false; // best holds a candidate (not only the megatron bound)
    auto take_megatron = [&] {
      allowed = std::max(allowed, best.microbatches.size());
      load(best);
      improve();
      best_step = step_time();
      best = emit();
      have_plan = true;
    };
    // the megatron plan bounds the rounds; it competes only when selected
    const plan megatron_plan =
        with_megatron && !selected(balanced::construct_megatron) ? best : plan{};
    if (with_megatron && selected(balanced::construct_megatron))
      take_megatron();
    else if (with_megatron)
      allowed = std::max(allowed, best.microbatches.size());
    auto consider = [&]() {
      // a construction far behind the best so far is not worth improving
      if (static_cast<std::size_t>(k_) > allowed || step_time() > 1.25 * best_step)
        return;
      improve();
      const double step = step_time();
      if (step < best_step) {
        best_step = step;
        best = emit();
        have_plan = true;
      }
    };
    // levelled, at the area-minimal CP sizes (the order and the rest of its start are the same
    // for every reach: worked out once)
    std::optional<levelled_start> start;
    const bool variants = selected(balanced::construct_levelled) &&
                          std::int64_t{n_} * world_ <= policy_.levelled_variants_limit;
    if (selected(balanced::construct_levelled) || !with_megatron) {
      cp_ = base_cp;
      cost_ = base_cost;
      start = levelled_inputs();
      // the variants start from the same slots: a copy for them, else the slots themselves
      std::vector<levelled_slot> slots;
      if (variants)
        slots = start->slots;
      else
        slots = std::move(start->slots);
      build_levelled(std::move(slots), *start, static_cast<std::int64_t>(allowed), 1.05);
      if (!with_megatron && static_cast<std::size_t>(k_) > allowed) {
        // more rounds than allowed: Megatron's count is the reference after all
        const plan levelled = emit();
        best = megatron_greedy{}.pack(pr_, estimator_, buckets);
        take_megatron();
        load(levelled);
      }
      consider();
    }
    // levelled with a narrower and a wider area reach, and with heavy samples kept apart (not
    // past the variants limit; heavy_share <= 0 turns the last one off)
    if (variants) {
      const auto levelled_variant = [&](double reach_area, double heavy_share) {
        cp_ = base_cp;
        cost_ = base_cost;
        build_levelled(start->slots, *start, static_cast<std::int64_t>(allowed), reach_area,
                       heavy_share);
        consider();
      };
      levelled_variant(1.0, 0.0);
      levelled_variant(1.10, 0.0);
      if (policy_.heavy_share > 0)
        levelled_variant(1.0, policy_.heavy_share);
    }
    // static: one CP size for all, heaviest first onto the least-loaded slot (strong when the
    // batch needs one size anyway: short-only, capped rollouts), up to 4x the megatron limit
    if (selected(balanced::construct_static) &&
        std::int64_t{n_} * world_ <= 4 * policy_.megatron_limit) {
      const static_cp fixed{};
      if (fixed.check(pr_).ok()) {
        load(fixed.pack(pr_, estimator_, buckets));
        consider();
      }
    }
    // targeted, with CP raising, at the fewest rounds that pack; with the megatron one
    for (std::int32_t k = k_min; selected(balanced::construct_targeted) && with_megatron &&
                                 static_cast<std::size_t>(k) <= allowed;
         k += o_.microbatch_multiple) {
      cp_ = base_cp;
      cost_ = base_cost;
      raise_cp_sizes(k);
      if (build_targeted(k, placement_order(buckets))) {
        consider();
        break;
      }
    }
    // no selected construction packed the batch within the bound: the megatron plan, improved
    if (!have_plan) {
      best = megatron_plan;
      take_megatron();
    }
    return best;
  }

private:
  struct group {
    std::int32_t mb = 0;
    std::int32_t first = 0;
    std::int32_t cp = 1;
    std::int64_t tokens = 0;
    double load = 0;
    std::vector<std::int32_t> samples;
    bool alive = true;
  };
  using keyed = std::pair<double, std::int32_t>; // (load, group id)
  template <class T>
  using pool_set = std::set<T, std::less<T>, node_allocator<T>>;
  //! `count` empty sets whose nodes come from the engine's arena.
  template <class T>
  std::vector<pool_set<T>> fresh_sets(std::size_t count) {
    std::vector<pool_set<T>> out;
    out.reserve(count);
    for (std::size_t i = 0; i < count; ++i)
      out.emplace_back(node_allocator<T>(arena_));
    return out;
  }

  //! Index of a legal size in pr.cp_sizes (every size the engine uses is legal).
  [[nodiscard]] std::size_t level_of(std::int32_t cp) const {
    const std::int32_t level = pr_.level_of_cp[static_cast<std::size_t>(cp)];
    DCPP_EXPECTS(level >= 0);
    return static_cast<std::size_t>(level);
  }
  [[nodiscard]] double cost(std::int32_t s, std::int32_t cp) const {
    return sample_cost(pr_, estimator_, static_cast<std::size_t>(s), cp);
  }
  [[nodiscard]] std::int64_t tokens(std::int32_t s, std::int32_t cp) const {
    return pr_.rank_tokens(static_cast<std::size_t>(s), cp);
  }
  //! CP sizes a sample may use: its smallest, then doublings (all legal sizes in the aligned
  //! topology; a geometric ladder in the contiguous one). A range, so that it allocates nothing.
  struct cp_ladder {
    struct iterator {
      std::int64_t cp;
      std::int32_t operator*() const { return static_cast<std::int32_t>(cp); }
      iterator& operator++() {
        cp *= 2;
        return *this;
      }
      bool operator!=(const iterator& other) const { return cp <= other.cp; }
    };
    std::int64_t first;
    std::int64_t last;
    [[nodiscard]] iterator begin() const { return {first}; }
    [[nodiscard]] iterator end() const { return {last}; }
  };
  [[nodiscard]] cp_ladder ladder(std::int32_t s) const {
    return {pr_.min_cp_of[static_cast<std::size_t>(s)], o_.effective_max_cp()};
  }

  void choose_cp_sizes() {
    cp_.resize(static_cast<std::size_t>(n_));
    cost_.resize(static_cast<std::size_t>(n_));
    // the least-area size of sample s, read from `row` (its row of the cost table) or the
    // estimator; a larger group only for a real saving, not for rounding noise in cost * cp
    const auto least_area = [&](std::int32_t s, const double* row) {
      std::pair<std::int32_t, double> pick{pr_.min_cp_of[static_cast<std::size_t>(s)],
                                           std::numeric_limits<double>::infinity()};
      double best = std::numeric_limits<double>::infinity();
      for (const std::int32_t c : ladder(s)) {
        const double w = row != nullptr ? row[level_of(c)] : cost(s, c);
        if (w * c < best * (1.0 - 1e-9)) {
          best = w * c;
          pick = {c, w};
        }
      }
      return pick;
    };
    if (pr_.cost_row.empty()) {
      for (std::int32_t s = 0; s < n_; ++s)
        std::tie(cp_[static_cast<std::size_t>(s)], cost_[static_cast<std::size_t>(s)]) =
            least_area(s, nullptr);
      return;
    }
    // samples of one length (one row of the cost table) get the same choice: made once per row
    std::vector<std::pair<std::int32_t, double>> by_row(pr_.row_sample.size());
    for (std::size_t r = 0; r < by_row.size(); ++r) {
      const std::int32_t first = pr_.row_sample[r];
      by_row[r] = least_area(first, pr_.cost_row_of(static_cast<std::size_t>(first)));
    }
    for (std::size_t s = 0; s < static_cast<std::size_t>(n_); ++s)
      std::tie(cp_[s], cost_[s]) = by_row[static_cast<std::size_t>(pr_.cost_row[s])];
  }

  [[nodiscard]] std::int32_t initial_microbatches() const {
    std::int64_t rank_tokens = 0;
    std::int64_t wide_tokens = 0; // samples whose group spans more than half the world
    for (std::int32_t s = 0; s < n_; ++s) {
      const auto c = cp_[static_cast<std::size_t>(s)];
      rank_tokens += tokens(s, c) * c;
      if (2 * c > world_)
        wide_tokens += tokens(s, c);
    }
    const std::int64_t k =
        std::max({std::int64_t{1}, ceil_div(rank_tokens, std::int64_t{world_} * budget_),
                  ceil_div(wide_tokens, budget_)});
    return round_up(static_cast<std::int32_t>(k), o_.microbatch_multiple);
  }

  void raise_cp_sizes(std::int32_t k) {
    for (int pass = 0; pass < 3; ++pass) {
      double area = 0;
      for (std::int32_t s = 0; s < n_; ++s)
        area += cost_[static_cast<std::size_t>(s)] * cp_[static_cast<std::size_t>(s)];
      target_ = area / (static_cast<double>(world_) * k);
      bool changed = false;
      for (std::int32_t s = 0; s < n_; ++s) {
        const auto us = static_cast<std::size_t>(s);
        if (cost_[us] <= target_)
          continue;
        std::int32_t pick = cp_[us];
        double pick_cost = cost_[us];
        for (const std::int32_t c : ladder(s)) {
          if (c <= cp_[us])
            continue;
          const double w = cost(s, c);
          if (w < pick_cost) {
            pick = c;
            pick_cost = w;
          }
          if (w <= target_)
            break;
        }
        if (pick != cp_[us]) {
          cp_[us] = pick;
          cost_[us] = pick_cost;
          changed = true;
        }
      }
      if (!changed)
        break;
    }
  }

  [[nodiscard]] std::vector<std::int32_t> placement_order(const bucket_list& buckets) const {
    std::vector<std::int32_t> bucket_of(static_cast<std::size_t>(n_), 0);
    for (std::size_t b = 0; b < buckets.size(); ++b)
      for (const auto s : buckets[b])
        bucket_of[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(b);
    std::vector<std::int32_t> order = flatten(buckets);
    // bucket, then descending CP size, then descending cost, then id
    sort_ids_by_key(order, [&](std::int32_t a) {
      const auto u = static_cast<std::size_t>(a);
      return std::tuple(bucket_of[u], -std::int64_t{cp_[u]}, -cost_[u]);
    });
    return order;
  }

  // ---- state --------------------------------------------------------------------------------

  void reset(std::int32_t k) {
    k_ = k;
    groups_.clear();
    by_level_.clear();
    load_indexed_ = false;
    owner_.assign(static_cast<std::size_t>(k) * static_cast<std::size_t>(world_), -1);
    free_.assign(static_cast<std::size_t>(k), world_);
    lowest_free_.assign(static_cast<std::size_t>(k), 0);
    mb_groups_.assign(static_cast<std::size_t>(k), {});
    mb_max_.assign(static_cast<std::size_t>(k), 0.0);
    by_room_.clear();
    for (std::int32_t m = 0; m < k; ++m)
      by_room_.emplace(-world_, m);
    group_of_.assign(static_cast<std::size_t>(n_), -1);
    by_slack_.clear();
    slack_indexed_ = false;
  }

  std::int32_t& owner(std::int32_t mb, std::int32_t rank) {
    return owner_[static_cast<std::size_t>(mb) * static_cast<std::size_t>(world_) +
                  static_cast<std::size_t>(rank)];
  }

  [[nodiscard]] std::optional<std::int32_t> free_block(std::int32_t mb, std::int32_t cp) {
    if (free_[static_cast<std::size_t>(mb)] < cp)
      return std::nullopt;
    const std::span<const std::int32_t> ranks(owner_.data() + static_cast<std::size_t>(mb) *
                                                                  static_cast<std::size_t>(world_),
                                              static_cast<std::size_t>(world_));
    return first_free_block(ranks, lowest_free_[static_cast<std::size_t>(mb)], o_, cp);
  }

  void set_free(std::int32_t mb, std::int32_t delta) {
    auto& f = free_[static_cast<std::size_t>(mb)];
    by_room_.erase({-f, mb});
    f += delta;
    by_room_.emplace(-f, mb);
  }

  std::int32_t open(std::int32_t mb, std::int32_t first, std::int32_t cp) {
    const auto id = static_cast<std::int32_t>(groups_.size());
    groups_.push_back(group{mb, first, cp, 0, 0.0, {}, true});
    for (std::int32_t r = first; r < first + cp; ++r)
      owner(mb, r) = id;
    auto& low = lowest_free_[static_cast<std::size_t>(mb)];
    while (low < world_ && owner(mb, low) >= 0)
      ++low;
    set_free(mb, -cp);
    mb_groups_[static_cast<std::size_t>(mb)].push_back(id);
    if (load_indexed_)
      by_level_[level_of(cp)].emplace(0.0, id);
    if (slack_indexed_)
      by_slack_[level_of(cp)].emplace(-slack(id), id);
    return id;
  }

  void close(std::int32_t id) {
    group& g = groups_[static_cast<std::size_t>(id)];
    if (load_indexed_)
      by_level_[level_of(g.cp)].erase({g.load, id});
    if (slack_indexed_)
      by_slack_[level_of(g.cp)].erase({-slack(id), id});
    g.alive = false;
    for (std::int32_t r = g.first; r < g.first + g.cp; ++r)
      owner(g.mb, r) = -1;
    auto& low = lowest_free_[static_cast<std::size_t>(g.mb)];
    low = std::min(low, g.first);
    set_free(g.mb, g.cp);
    auto& list = mb_groups_[static_cast<std::size_t>(g.mb)];
    list.erase(std::find(list.begin(), list.end(), id));
  }

  void set_load(std::int32_t id, double load) {
    group& g = groups_[static_cast<std::size_t>(id)];
    if (load_indexed_)
      by_level_[level_of(g.cp)].erase({g.load, id});
    if (slack_indexed_)
      by_slack_[level_of(g.cp)].erase({-slack(id), id});
    g.load = load;
    if (load_indexed_)
      by_level_[level_of(g.cp)].emplace(load, id);
    if (slack_indexed_)
      by_slack_[level_of(g.cp)].emplace(-slack(id), id);
  }

  //! Puts sample s into group id at the group's size; the group's load and index are left to
  //! the caller. Returns the sample's cost there.
  double attach(std::int32_t id, std::int32_t s) {
    group& g = groups_[static_cast<std::size_t>(id)];
    const auto us = static_cast<std::size_t>(s);
    cp_[us] = g.cp;
    cost_[us] = cost(s, g.cp);
    g.samples.push_back(s);
    g.tokens += tokens(s, g.cp);
    group_of_[us] = id;
    return cost_[us];
  }

  void insert(std::int32_t id, std::int32_t s) {
    const double w = attach(id, s);
    set_load(id, groups_[static_cast<std::size_t>(id)].load + w);
  }

  void erase(std::int32_t id, std::int32_t s) {
    group& g = groups_[static_cast<std::size_t>(id)];
    const auto us = static_cast<std::size_t>(s);
    g.samples.erase(std::find(g.samples.begin(), g.samples.end(), s));
    g.tokens -= tokens(s, g.cp);
    group_of_[us] = -1;
    if (g.samples.empty()) {
      close(id);
      g.load = 0;
    } else {
      // recompute rather than subtract: loads stay exact sums, whatever the history
      double load = 0;
      for (const auto t : g.samples)
        load += cost_[static_cast<std::size_t>(t)];
      set_load(id, load);
    }
  }

  void refresh_max(std::int32_t mb) {
    double m = 0;
    for (const auto id : mb_groups_[static_cast<std::size_t>(mb)])
      m = std::max(m, groups_[static_cast<std::size_t>(id)].load);
    mb_max_[static_cast<std::size_t>(mb)] = m;
  }

  // ---- constructions ------------------------------------------------------------------------

  //! Replaces the state with plan `p`.
  void load(const plan& p) {
    reset(static_cast<std::int32_t>(p.microbatches.size()));
    for (std::size_t m = 0; m < p.microbatches.size(); ++m)
      for (const auto& g : p.microbatches[m].groups) {
        const std::int32_t id = open(static_cast<std::int32_t>(m), g.first_rank, g.cp);
        groups_[static_cast<std::size_t>(id)].samples.reserve(g.samples.size());
        // the samples first, the group's key in the index once (as `insert` would leave it)
        double load = 0;
        for (const std::int32_t s : g.samples)
          load += attach(id, s);
        set_load(id, load);
      }
    for (std::int32_t m = 0; m < k_; ++m)
      refresh_max(m);
  }

  //! Replaces the state with the levelled construction's rounds: what `load(to_plan(...))`
  //! gives (same group ids, same sample order), without the plan in between. Not through
  //! `attach`: the rounds already hold each sample's cost (cost_) and each group's tokens, and
  //! the sample lists are moved (measured: recomputing them costs 3% of a 65,536-sample plan).
  void load(std::vector<microbatch_state>& rounds) {
    reset(static_cast<std::int32_t>(rounds.size()));
    for (std::size_t m = 0; m < rounds.size(); ++m)
      for (auto& g : rounds[m].groups()) {
        if (g.samples.empty())
          continue;
        const std::int32_t id = open(static_cast<std::int32_t>(m), g.first_rank, g.cp);
        group& h = groups_[static_cast<std::size_t>(id)];
        h.samples = std::move(g.samples);
        double load = 0;
        for (const std::int32_t s : h.samples) {
          const auto us = static_cast<std::size_t>(s);
          DCPP_EXPECTS(cp_[us] == h.cp); // placed at the group's size; cost_ is its cost there
          group_of_[us] = id;
          load += cost_[us];
        }
        h.tokens = g.tokens;
        h.load = load;
      }
    for (std::int32_t m = 0; m < k_; ++m)
      refresh_max(m);
  }

  //! Sum over rounds of the max rank time, plus the estimator's overhead per round.
  [[nodiscard]] double step_time() const {
    double total = static_cast<double>(k_) * microbatch_overhead(estimator_);
    for (const double m : mb_max_)
      total += m;
    return total;
  }

  //! One sample as the levelled construction sees it, stored in the order it visits them
  //! (descending work per token): a round's scan reads these one after another instead of
  //! fetching each sample's fields from arrays indexed by sample id (measured: those fetches,
  //! random over 65,536 samples, were a third of the construction's cycles).
  struct levelled_slot {
    double cost = 0;             // at `cp`
    double per_token = 0;        // work per rank token at the area-minimal size
    const double* row = nullptr; // the sample's cost-table row (nullptr: no table)
    std::int64_t length = 0;
    std::int64_t tokens = 0; // per rank at `cp`
    std::int32_t id = 0;
    std::int32_t cp = 1;
    std::int32_t min_cp = 1;
    std::int32_t reach_from = 0; // the size `reach` was worked out from (0: not yet)
    std::int32_t reach = 0;      // the largest size its search looks at from `reach_from`
  };

  //! What the levelled construction starts from at the area-minimal CP sizes (the state's cp_
  //! and cost_ when it runs): the samples by work per token, and the token sums it needs.
  struct levelled_start {
    std::vector<levelled_slot> slots; // descending work per token, then descending length, then id
    std::int64_t min_tokens = 0;      // the fewest rank tokens of any sample
    std::int64_t rank_tokens = 0;     // sum of rank tokens x CP size
  };
  [[nodiscard]] levelled_start levelled_inputs() const {
    levelled_start out;
    std::vector<std::int32_t> order(static_cast<std::size_t>(n_));
    out.min_tokens = budget_;
    out.slots.resize(static_cast<std::size_t>(n_));
    const auto fill = [&](levelled_slot& x, std::int32_t s, std::int64_t t, double per_token) {
      const auto u = static_cast<std::size_t>(s);
      x.cost = cost_[u];
      x.per_token = per_token;
      x.row = pr_.cost_row_of(u);
      x.length = pr_.lengths[u];
      x.id = s;
      x.cp = cp_[u];
      x.tokens = t;
      x.min_cp = pr_.min_cp_of[u];
    };
    if (pr_.cost_row.empty()) {
      std::vector<double> per_token(static_cast<std::size_t>(n_));
      std::vector<std::int64_t> rank_tokens(static_cast<std::size_t>(n_));
      for (std::int32_t s = 0; s < n_; ++s) {
        const auto us = static_cast<std::size_t>(s);
        const std::int64_t t = tokens(s, cp_[us]);
        order[us] = s;
        rank_tokens[us] = t;
        per_token[us] = cost_[us] / static_cast<double>(t);
        out.min_tokens = std::min(out.min_tokens, t);
        out.rank_tokens += t * cp_[us];
      }
      sort_ids_by_key(order, [&](std::int32_t a) {
        const auto u = static_cast<std::size_t>(a);
        return std::pair(-per_token[u], -pr_.lengths[u]);
      });
      for (std::size_t k = 0; k < order.size(); ++k) {
        const auto u = static_cast<std::size_t>(order[k]);
        fill(out.slots[k], order[k], rank_tokens[u], per_token[u]);
      }
      return out;
    }
    // Samples of one row (one length) share size, cost, tokens and so the key (the CP sizes are
    // chosen per row): worked out and sorted once per row, each row's samples then listed in
    // ascending id, which is where a sort of every sample by (key, id) puts them (rows differ in
    // length, so in key).
    const std::size_t rows = pr_.row_sample.size();
    std::vector<double> row_per_token(rows);
    std::vector<std::int64_t> row_tokens(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::int32_t first = pr_.row_sample[r];
      const auto uf = static_cast<std::size_t>(first);
      row_tokens[r] = tokens(first, cp_[uf]);
      row_per_token[r] = cost_[uf] / static_cast<double>(row_tokens[r]);
      out.min_tokens = std::min(out.min_tokens, row_tokens[r]);
    }
    std::vector<std::int32_t> start(rows + 1, 0);
    for (std::int32_t s = 0; s < n_; ++s) {
      const auto us = static_cast<std::size_t>(s);
      const auto r = static_cast<std::size_t>(pr_.cost_row[us]);
      DCPP_EXPECTS(cp_[us] == cp_[static_cast<std::size_t>(pr_.row_sample[r])]);
      ++start[r + 1];
      out.rank_tokens += row_tokens[r] * cp_[us];
    }
    for (std::size_t r = 0; r < rows; ++r)
      start[r + 1] += start[r];
    std::vector<std::int32_t> members(static_cast<std::size_t>(n_));
    std::vector<std::int32_t> next(start.begin(), start.end() - 1);
    for (std::int32_t s = 0; s < n_; ++s)
      members[static_cast<std::size_t>(
          next[static_cast<std::size_t>(pr_.cost_row[static_cast<std::size_t>(s)])]++)] = s;
    std::vector<std::int32_t> firsts = pr_.row_sample;
    sort_ids_by_key(firsts, [&](std::int32_t a) {
      const auto u = static_cast<std::size_t>(a);
      return std::pair(-row_per_token[static_cast<std::size_t>(pr_.cost_row[u])], -pr_.lengths[u]);
    });
    std::size_t k = 0;
    for (const std::int32_t f : firsts) {
      const auto r = static_cast<std::size_t>(pr_.cost_row[static_cast<std::size_t>(f)]);
      for (auto m = start[r]; m < start[r + 1]; ++m)
        fill(out.slots[k++], members[static_cast<std::size_t>(m)], row_tokens[r], row_per_token[r]);
    }
    return out;
  }

  //! The estimator's cost of slot `x` at a size on its ladder (what `cost(x.id, c)` returns).
  [[nodiscard]] double slot_cost(const levelled_slot& x, std::int32_t c) const {
    return x.row != nullptr ? x.row[level_of(c)]
                            : static_cast<double>(estimator_.cost(x.length, c));
  }
  [[nodiscard]] std::int64_t slot_tokens(const levelled_slot& x, std::int32_t c) const {
    return tokens_per_rank(o_, x.length, c);
  }

  //! Moves slot `x` to a larger CP size when its cost exceeds `level` and a larger group
  //! brings it to the level (or as close as the ladder goes) for at most 2% more rank area:
  //! long samples, whose attention dominates, spread for free. Each step up may leave
  //! `(new cp - old cp) * M` rank tokens unused, so it is paid from `slack`: the rank tokens the
  //! allowed rounds hold beyond what the samples need.
  void raise_to_level(levelled_slot& x, double level, std::int64_t& slack) const {
    if (x.cost <= level)
      return;
    const double area = x.cost * x.cp;
    for (const std::int32_t c : cp_ladder{x.min_cp, o_.effective_max_cp()}) {
      if (c <= x.cp)
        continue;
      const double w = slot_cost(x, c);
      const std::int64_t price = std::int64_t{c - x.cp} * budget_;
      if (w * c > 1.02 * area || w >= x.cost || price > slack)
        break;
      slack -= price;
      x.cp = c;
      x.cost = w;
      x.tokens = slot_tokens(x, c);
      if (w <= level)
        break;
    }
  }

  //! Rounds one after another from the samples sorted by work per token (descending): each
  //! sample opens a group on free ranks while there are some, then joins the least-loaded group
  //! with token room of its CP size or of a larger one where it costs at most `reach_area` times
  //! its rank area, or waits for the next round. With `heavy_share > 0` a sample costing more
  //! than that share of the round's level joins no group (it only opens one). Starts from
  //! `slots` (`start.slots` or a copy: the samples at the sizes `start` was made at); leaves the
  //! sizes and costs it chose in cp_ and cost_.
  void build_levelled(std::vector<levelled_slot> slots, const levelled_start& start,
                      std::int64_t rounds_allowed, double reach_area, double heavy_share = 0.0) {
    // positions in `slots` of the samples not placed yet, in order
    std::vector<std::int32_t> remaining(slots.size());
    std::iota(remaining.begin(), remaining.end(), 0);
    const std::int64_t min_tokens = start.min_tokens;
    std::int64_t slack = rounds_allowed * world_ * budget_ - start.rank_tokens;
    std::vector<microbatch_state> rounds;
    const std::size_t levels = pr_.cp_sizes.size();
    // per CP size: (load, group of the round) and (tokens, group)
    std::vector<indexed_heap<double>> by_load(levels);
    std::vector<indexed_heap<std::int64_t>> by_tokens(levels);
    // A quick, exact "no" for a sample that fits no group of the round (most visits of a full
    // round): per CP size the most token room of any group (-1: none; rooms only shrink in a
    // round), and per sample the largest size its search would look at (the area limit
    // below), worked out once per (sample, size).
    std::vector<std::int64_t> room(levels, -1);
    // the largest size x's search looks at from size c (cached in the slot)
    const auto reach_of = [&](levelled_slot& x, std::int32_t c) {
      if (x.reach_from != c) {
        const double area = x.cost * c;
        std::int32_t r = c;
        for (const std::int32_t c2 : cp_ladder{std::int64_t{c} * 2, o_.effective_max_cp()}) {
          if (slot_cost(x, c2) * c2 > reach_area * area)
            break;
          r = c2;
        }
        x.reach_from = c;
        x.reach = r;
      }
      return x.reach;
    };
    // at x's size or a larger one of its search (the doublings from x.cp are its ladder's
    // sizes from there on)
    const auto fits_somewhere = [&](levelled_slot& x) {
      for (const std::int32_t c2 : cp_ladder{x.cp, reach_of(x, x.cp)})
        if (room[level_of(c2)] >= (c2 == x.cp ? x.tokens : slot_tokens(x, c2)))
          return true;
      return false;
    };
    std::vector<std::int32_t> deferred;
    while (!remaining.empty()) {
      microbatch_state mb(world_);
      const auto tokens_of = [&mb](std::int32_t id) {
        return mb.groups()[static_cast<std::size_t>(id)].tokens;
      };
      for (std::size_t l = 0; l < levels; ++l) {
        by_load[l].clear();
        by_tokens[l].clear();
        room[l] = -1;
      }
      deferred.clear();
      // the round's level: what a rank full of tokens costs at the token-weighted mean work per
      // token of the samples that would fill this round
      double level_cost = 0;
      {
        const std::int64_t capacity = std::int64_t{world_} * budget_;
        std::int64_t filled = 0;
        double work = 0;
        for (std::size_t k = 0; k < remaining.size() && filled < capacity; ++k) {
          const levelled_slot& x = slots[static_cast<std::size_t>(remaining[k])];
          const std::int64_t t = x.tokens * x.cp;
          filled += t;
          work += x.per_token * static_cast<double>(t);
        }
        level_cost = work / static_cast<double>(filled) * static_cast<double>(budget_);
      }
      auto room_left = [&] {
        for (std::size_t l = 0; l < levels; ++l)
          if (const auto t = by_tokens[l].top(); t && budget_ - t->first >= min_tokens)
            return true;
        return false;
      };
      // A round without free ranks whose groups have room only for samples that cannot reach
      // them (too small for a large group's area limit) would otherwise be scanned to the
      // end for nothing. After a long run of misses (`run`, at least an eighth of the rest) the
      // rest is checked from its end, where the smallest samples are: the round ends when no
      // sample from position i on is due a raise and none fits a group at a size its search
      // includes, i.e. when a full scan would defer exactly those samples and change nothing
      // else. The check stops at the first sample that may fit, so a failed one is usually short.
      std::size_t next_check = 0;
      const auto exhausted = [&](std::size_t i, std::int32_t run, double round_max) {
        const std::size_t rest = remaining.size() - i;
        if (!policy_.end_rounds_early || run < 256 || static_cast<std::size_t>(run) * 8 < rest ||
            i < next_check)
          return false;
        next_check = i + rest / 8;
        const double level = std::max(level_cost, round_max);
        for (std::size_t j = remaining.size(); j-- > i;) {
          levelled_slot& x = slots[static_cast<std::size_t>(remaining[j])];
          if (x.cost > level || fits_somewhere(x))
            return false;
        }
        return true;
      };
      std::int32_t misses = 0;
      double round_max = 0;
      for (std::size_t i = 0; i < remaining.size(); ++i) {
        // a full round: no free ranks and no group with room for the smallest sample
        // (checked every 16 misses)
        if (misses > 0 && misses % 16 == 0 && mb.free_ranks() == 0) {
          if (!room_left() || exhausted(i, misses, round_max)) {
            deferred.insert(deferred.end(), remaining.begin() + static_cast<std::ptrdiff_t>(i),
                            remaining.end());
            break;
          }
        }
        levelled_slot& x = slots[static_cast<std::size_t>(remaining[i])];
        const double level = std::max(level_cost, round_max);
        raise_to_level(x, level, slack);
        const std::int32_t c = x.cp;
        std::int32_t chosen = -1;
        std::int32_t chosen_cp = c;
        if (const auto first = mb.free_block(o_, c)) {
          chosen = mb.open(*first, c);
        } else if (!(heavy_share > 0 && x.cost > heavy_share * level) && fits_somewhere(x)) {
          // the least-loaded group with token room (among the first few by load, else the one
          // with the most room), of this CP size or of a larger one where the sample costs at
          // most `reach_area` times the rank area (5% more, or the variants' 0% and 10%)
          // (fits_somewhere has worked out the sizes within that: up to x.reach)
          double best = std::numeric_limits<double>::infinity();
          for (const std::int32_t c2 : cp_ladder{c, x.reach}) {
            const double w2 = c2 == c ? x.cost : slot_cost(x, c2);
            const std::int64_t t2 = c2 == c ? x.tokens : slot_tokens(x, c2);
            const std::size_t l = level_of(c2);
            const auto roomiest = by_tokens[l].top();
            if (!roomiest || roomiest->first + t2 > budget_)
              continue;
            std::int32_t found = roomiest->second;
            by_load[l].visit(policy_.candidates_per_level, [&](const auto& e) {
              if (tokens_of(e.second) + t2 > budget_)
                return false;
              found = e.second;
              return true;
            });
            const double load = mb.groups()[static_cast<std::size_t>(found)].load + w2;
            if (load < best) {
              best = load;
              chosen = found;
              chosen_cp = c2;
            }
          }
        }
        if (chosen < 0) {
          ++misses;
          deferred.push_back(remaining[i]);
          continue;
        }
        misses = 0;
        if (chosen_cp != c) {
          x.cp = chosen_cp;
          x.cost = slot_cost(x, chosen_cp);
          x.tokens = slot_tokens(x, chosen_cp);
        }
        const std::size_t l = level_of(chosen_cp);
        auto& g = mb.groups()[static_cast<std::size_t>(chosen)];
        mb.add(chosen, x.id, x.tokens, x.cost);
        round_max = std::max(round_max, g.load);
        by_load[l].set(g.load, chosen);
        by_tokens[l].set(g.tokens, chosen);
        room[l] = budget_ - by_tokens[l].top()->first;
      }
      rounds.push_back(std::move(mb));
      remaining.swap(deferred);
    }
    for (const levelled_slot& x : slots) {
      cp_[static_cast<std::size_t>(x.id)] = x.cp;
      cost_[static_cast<std::size_t>(x.id)] = x.cost;
    }
    split_to_multiple(rounds, o_.microbatch_multiple, pr_, estimator_, /*grow=*/false);
    load(rounds);
  }

  // ---- placement ----------------------------------------------------------------------------

  bool build_targeted(std::int32_t k, const std::vector<std::int32_t>& order) {
    reset(k);
    by_level_ = fresh_sets<keyed>(pr_.cp_sizes.size());
    load_indexed_ = true;
    for (const std::int32_t s : order)
      if (!place(s))
        return false;
    return true;
  }

  void note_load(std::int32_t id) {
    const group& g = groups_[static_cast<std::size_t>(id)];
    auto& mx = mb_max_[static_cast<std::size_t>(g.mb)];
    mx = std::max(mx, g.load);
  }

  bool place(std::int32_t s) {
    const auto us = static_cast<std::size_t>(s);
    const std::int32_t c = cp_[us];
    const double w = cost_[us];
    const std::int64_t t = tokens(s, c);
    // (a) best fit: the fullest group of its CP size that stays within the target
    {
      auto& level = by_level_[level_of(c)];
      auto it = level.upper_bound({target_ - w, std::numeric_limits<std::int32_t>::max()});
      for (std::int32_t tries = 0; it != level.begin() && tries < policy_.candidates_per_level;
           ++tries) {
        --it;
        if (groups_[static_cast<std::size_t>(it->second)].tokens + t <= budget_) {
          const std::int32_t id = it->second;
          insert(id, s);
          note_load(id);
          return true;
        }
      }
    }
    // (b) a new group on the round with the most free ranks
    for (const auto& [neg_free, mb] : by_room_) {
      if (-neg_free < c)
        break;
      if (const auto first = free_block(mb, c)) {
        const std::int32_t id = open(mb, *first, c);
        insert(id, s);
        note_load(id);
        return true;
      }
    }
    // (c) the group (any legal CP size) that raises the step time least: the excess over its
    //     round's level (target or current max) plus the extra rank area spread over the world
    const double base_area = w * c;
    double best = std::numeric_limits<double>::infinity();
    std::int32_t best_id = -1;
    for (const std::int32_t c2 : ladder(s)) {
      const double w2 = c2 == c ? w : cost(s, c2);
      const std::int64_t t2 = tokens(s, c2);
      const double inflation = std::max(0.0, w2 * c2 - base_area) / world_;
      std::int32_t found = 0;
      for (const auto& [load, id] : by_level_[level_of(c2)]) {
        if (load + w2 - target_ + inflation >= best)
          break;
        const group& h = groups_[static_cast<std::size_t>(id)];
        if (h.tokens + t2 > budget_)
          continue;
        const double level = std::max(target_, mb_max_[static_cast<std::size_t>(h.mb)]);
        const double score = std::max(0.0, load + w2 - level) + inflation;
        if (score < best) {
          best = score;
          best_id = id;
        }
        if (++found >= policy_.candidates_per_level)
          break;
      }
    }
    if (best_id < 0)
      return false;
    insert(best_id, s);
    note_load(best_id);
    return true;
  }

  // ---- improvement --------------------------------------------------------------------------
  // Destinations are ordered by slack: how far a group's load is below its round's maximum.
  // Adding w to a group with slack >= w leaves the step time unchanged.

  [[nodiscard]] double slack(std::int32_t id) const {
    const group& g = groups_[static_cast<std::size_t>(id)];
    return mb_max_[static_cast<std::size_t>(g.mb)] - g.load;
  }

  void rekey_round(std::int32_t mb, double old_max) {
    for (const auto id : mb_groups_[static_cast<std::size_t>(mb)]) {
      const group& g = groups_[static_cast<std::size_t>(id)];
      auto& set = by_slack_[level_of(g.cp)];
      set.erase({-(old_max - g.load), id});
      set.emplace(-slack(id), id);
    }
  }

  void build_slack_index() {
    by_level_.clear(); // placement is over: only the improvement's index is kept up to date
    load_indexed_ = false;
    for (std::int32_t m = 0; m < k_; ++m)
      refresh_max(m);
    by_slack_ = fresh_sets<keyed>(pr_.cp_sizes.size());
    for (std::size_t id = 0; id < groups_.size(); ++id)
      if (groups_[id].alive)
        by_slack_[level_of(groups_[id].cp)].emplace(-slack(static_cast<std::int32_t>(id)),
                                                    static_cast<std::int32_t>(id));
    slack_indexed_ = true;
  }

  struct action {
    double delta = 0; // change of the step time (negative: better)
    std::int32_t sample = -1;
    std::int32_t to_group = -1; // move into this group, or
    std::int32_t to_mb = -1;    // open a group in this round at to_first with to_cp
    std::int32_t to_first = 0;
    std::int32_t to_cp = 0;
    std::int32_t swap_with = -1; // swap: the sample of to_group that comes back
  };

  void improve() {
    build_slack_index();
    double total = 0;
    for (std::int32_t m = 0; m < k_; ++m)
      total += mb_max_[static_cast<std::size_t>(m)];
    eps_ = 1e-12 * std::max(total, 1e-300);
    // improve_round is a function of the state, which only a move changes: a round that found
    // nothing is not examined again until a move has been made somewhere
    std::uint64_t moves = 0;
    std::vector<std::uint64_t> idle_since(static_cast<std::size_t>(k_), ~std::uint64_t{0});
    for (std::int32_t sweep = 0; sweep < policy_.improvement_sweeps; ++sweep) {
      bool improved = false;
      for (std::int32_t m = 0; m < k_; ++m) {
        auto& idle = idle_since[static_cast<std::size_t>(m)];
        if (idle == moves)
          continue;
        for (std::int32_t step = 0; step < 4 * world_; ++step) {
          if (!improve_round(m)) {
            idle = moves;
            break;
          }
          improved = true;
          ++moves;
        }
      }
      if (!improved)
        break;
    }
  }

  //! The step-time change when round `other` gets a group of load `load`.
  [[nodiscard]] double rise(std::int32_t other, double load) const {
    return std::max(0.0, load - mb_max_[static_cast<std::size_t>(other)]);
  }

  bool improve_round(std::int32_t m) {
    const auto& list = mb_groups_[static_cast<std::size_t>(m)];
    if (list.empty())
      return false;
    std::int32_t gid = -1;
    double second = 0;
    for (const auto id : list) {
      const double l = groups_[static_cast<std::size_t>(id)].load;
      if (gid < 0 || l > groups_[static_cast<std::size_t>(gid)].load) {
        if (gid >= 0)
          second = std::max(second, groups_[static_cast<std::size_t>(gid)].load);
        gid = id;
      } else {
        second = std::max(second, l);
      }
    }
    const group& g = groups_[static_cast<std::size_t>(gid)];
    const double max_m = g.load;
    if (max_m - second <= eps_)
      return false;
    action best;
    best.delta = -eps_;
    for (const std::int32_t s : g.samples) {
      const double w = cost_[static_cast<std::size_t>(s)];
      const double rest = std::max(second, g.load - w);
      if (max_m - rest + eps_ <= -best.delta)
        continue; // cannot beat the best found
      // moves: into the groups with the most slack, or onto free ranks
      for (const std::int32_t c2 : ladder(s)) {
        const double w2 = c2 == g.cp ? w : cost(s, c2);
        const std::int64_t t2 = tokens(s, c2);
        std::int32_t tries = 0;
        for (const auto& [neg_slack, id] : by_slack_[level_of(c2)]) {
          if (rest - max_m + std::max(0.0, w2 + neg_slack) >= best.delta)
            break;
          if (id == gid)
            continue;
          const group& h = groups_[static_cast<std::size_t>(id)];
          if (h.tokens + t2 > budget_) {
            if (++tries > improve_candidates_)
              break;
            continue;
          }
          const double delta = h.mb == m ? std::max(rest, h.load + w2) - max_m
                                         : rest - max_m + rise(h.mb, h.load + w2);
          if (delta < best.delta)
            best = action{delta, s, id, -1, 0, 0, -1};
          break; // later entries have less slack
        }
        for (const auto& [neg_free, mb] : by_room_) {
          if (-neg_free < c2)
            break;
          const double delta = mb == m ? std::max(rest, w2) - max_m : rest - max_m + rise(mb, w2);
          if (delta < best.delta) {
            if (const auto first = free_block(mb, c2))
              best = action{delta, s, -1, mb, *first, c2, -1};
          }
        }
      }
      // swaps: s goes to a group of another round, of any size s may use (most slack first),
      // and one of that group's samples that may use g's size comes back
      const std::int64_t ts = tokens(s, g.cp);
      for (const std::int32_t c2 : ladder(s)) {
        const double ws2 = c2 == g.cp ? w : cost(s, c2);
        const std::int64_t ts2 = tokens(s, c2);
        std::int32_t tries = 0;
        for (const auto& [neg_slack, id] : by_slack_[level_of(c2)]) {
          if (++tries > improve_candidates_)
            break;
          const group& h = groups_[static_cast<std::size_t>(id)];
          if (id == gid || h.mb == m)
            continue;
          for (const std::int32_t u : h.samples) {
            const auto uu = static_cast<std::size_t>(u);
            if (pr_.min_cp_of[uu] > g.cp)
              continue;
            const double wu_g = c2 == g.cp ? cost_[uu] : cost(u, g.cp);
            const double g_new = g.load - w + wu_g;
            if (g_new >= g.load)
              continue;
            if (g.tokens - ts + tokens(u, g.cp) > budget_ ||
                h.tokens - tokens(u, c2) + ts2 > budget_)
              continue;
            const double h_new = h.load - cost_[uu] + ws2;
            const double delta = std::max(second, g_new) - max_m + rise(h.mb, h_new);
            if (delta < best.delta)
              best = action{delta, s, id, -1, 0, 0, u};
          }
        }
      }
    }
    if (best.sample < 0)
      return false;
    apply(gid, best);
    return true;
  }

  void apply(std::int32_t from, const action& a) {
    const std::int32_t from_mb = groups_[static_cast<std::size_t>(from)].mb;
    std::int32_t to = a.to_group;
    if (a.swap_with >= 0) {
      // both groups keep a sample: insert first so that neither closes on the way
      insert(from, a.swap_with);
      insert(to, a.sample);
      erase_from(to, a.swap_with);
      erase_from(from, a.sample);
    } else {
      if (to < 0)
        to = open(a.to_mb, a.to_first, a.to_cp);
      erase_from(from, a.sample);
      insert(to, a.sample);
    }
    const std::int32_t to_mb = groups_[static_cast<std::size_t>(to)].mb;
    for (const std::int32_t mb : {from_mb, to_mb}) {
      const double old_max = mb_max_[static_cast<std::size_t>(mb)];
      refresh_max(mb);
      if (mb_max_[static_cast<std::size_t>(mb)] != old_max)
        rekey_round(mb, old_max);
    }
  }

  //! Removes `s` from group `id` where it may also be listed in another group already (a swap
  //! in progress): only `id`'s list, tokens and load change.
  void erase_from(std::int32_t id, std::int32_t s) {
    const auto us = static_cast<std::size_t>(s);
    const std::int32_t now = group_of_[us];
    const double keep_cost = cost_[us];
    const std::int32_t keep_cp = cp_[us];
    cp_[us] = groups_[static_cast<std::size_t>(id)].cp; // cost and tokens as in `id`
    cost_[us] = cost(s, cp_[us]);
    erase(id, s);
    if (now != id && now >= 0) {
      group_of_[us] = now;
      cp_[us] = keep_cp;
      cost_[us] = keep_cost;
    }
  }

  //! The plan of the current state, each group's samples ascending (filled in sample order, so
  //! that canonicalize finds them sorted).
  plan emit() const {
    plan p = make_plan_shell(pr_, balanced::name);
    p.microbatches.resize(static_cast<std::size_t>(k_));
    std::vector<std::size_t> slot(groups_.size(), 0); // group id -> index in its round's list
    for (std::size_t id = 0; id < groups_.size(); ++id) {
      const group& g = groups_[id];
      if (!g.alive || g.samples.empty())
        continue;
      auto& list = p.microbatches[static_cast<std::size_t>(g.mb)].groups;
      slot[id] = list.size();
      list.push_back(plan_group{g.first, g.cp, {}, 0, 0.0});
      list.back().samples.reserve(g.samples.size());
    }
    for (std::int32_t s = 0; s < n_; ++s) {
      DCPP_EXPECTS(group_of_[static_cast<std::size_t>(s)] >= 0); // every sample has a group
      const auto id = static_cast<std::size_t>(group_of_[static_cast<std::size_t>(s)]);
      p.microbatches[static_cast<std::size_t>(groups_[id].mb)].groups[slot[id]].samples.push_back(
          s);
    }
    return p;
  }

  const problem& pr_;
  const Estimator& estimator_;
  const balanced& policy_;
  const plan_options& o_;
  std::int32_t n_;
  std::int32_t world_;
  std::int64_t budget_;
  std::int32_t improve_candidates_;
  std::int32_t k_ = 0;
  double target_ = 0;
  double eps_ = 0;
  std::vector<std::int32_t> cp_;
  std::vector<double> cost_;
  std::vector<group> groups_;
  // The ordered indexes allocate one node per entry and are updated for every placement: their
  // nodes come from an arena that lives as long as the engine (no malloc/free per update).
  node_arena arena_;
  std::vector<pool_set<keyed>> by_level_; // (load, group id), while `place` builds (targeted)
  bool load_indexed_ = false;
  std::vector<pool_set<keyed>> by_slack_; // (-slack, group id), built for the improvement
  bool slack_indexed_ = false;
  std::vector<std::int32_t> owner_;       // (mb, rank) -> group id or -1
  std::vector<std::int32_t> free_;        // per mb
  std::vector<std::int32_t> lowest_free_; // per mb: no free rank below this
  std::vector<std::vector<std::int32_t>> mb_groups_;
  std::vector<double> mb_max_;
  pool_set<std::pair<std::int32_t, std::int32_t>> by_room_{
      node_allocator<std::pair<std::int32_t, std::int32_t>>(arena_)}; // (-free ranks, mb)
  std::vector<std::int32_t> group_of_;
};

} // namespace detail
} // namespace dcpp
