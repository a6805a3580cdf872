// The packing-policy concept and the micro-batch bookkeeping that the shipped policies share.
#pragma once

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"
#include "dcpp/planner/bucketing.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/packing/microbatch_state.hpp"
#include "dcpp/planner/packing/remaining_samples.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

//! A packing policy turns a problem into groups and micro-batches: `pack(problem, estimator)`
//! fills `plan::microbatches` (the planner canonicalises, evaluates and validates what it
//! returns); `name` identifies it in outputs. A policy may also offer `check(problem) -> status`
//! for conditions of its own (e.g. a fixed CP size too small for the longest sample). A policy
//! that takes samples in classes holds its bucketing policy and makes the buckets itself
//! (`make_buckets`); the shipped ones also offer `pack_in_order(problem, estimator, buckets)`.
template <class P, class E>
concept packing_policy = std::copyable<P> && workload_estimator<E> &&
    requires(const P& p, const problem& pr, const E& e) {
  { p.pack(pr, e) } -> std::same_as<plan>;
  { P::name } -> std::convertible_to<std::string_view>;
};

namespace detail {

//! Raises the micro-batch count to a multiple of `multiple` by splitting the micro-batch with
//! the most groups in two (groups dealt alternately by descending load), or, when every
//! micro-batch has one group, the group with the most samples. With `grow`, idle ranks of the
//! two halves are filled by growing groups. Appends an empty micro-batch only when nothing can
//! be split (fewer samples than the multiple).
template <class Estimator>
void split_to_multiple(std::vector<microbatch_state>& mbs, std::int32_t multiple, const problem& pr,
                       const Estimator& estimator, bool grow) {
  const std::int32_t world = pr.options.world_size;
  while (mbs.size() % static_cast<std::size_t>(multiple) != 0) {
    std::optional<std::size_t> by_groups;
    std::optional<std::size_t> by_samples; // only single-group micro-batches remain then
    std::size_t most_samples = 1;
    for (std::size_t m = 0; m < mbs.size(); ++m) {
      const auto& gs = mbs[m].groups();
      if (gs.size() >= 2 && (!by_groups || gs.size() > mbs[*by_groups].groups().size()))
        by_groups = m;
      if (gs.size() == 1 && gs.front().samples.size() > most_samples) {
        most_samples = gs.front().samples.size();
        by_samples = m;
      }
    }
    microbatch_state a(world);
    microbatch_state b(world);
    if (by_groups) {
      auto groups = mbs[*by_groups].groups();
      std::stable_sort(groups.begin(), groups.end(),
                       [](const auto& x, const auto& y) { return x.load > y.load; });
      double load_a = 0;
      double load_b = 0;
      for (auto& g : groups) {
        auto& target = load_a <= load_b ? a : b;
        (load_a <= load_b ? load_a : load_b) += g.load * g.cp;
        const auto block = target.free_block(pr.options, g.cp);
        const std::int32_t gi = target.open(block.value_or(0), g.cp);
        target.groups()[static_cast<std::size_t>(gi)] = g;
        target.groups()[static_cast<std::size_t>(gi)].first_rank = block.value_or(0);
      }
      a.compact();
      b.compact();
      mbs[*by_groups] = std::move(a);
      mbs.insert(mbs.begin() + static_cast<std::ptrdiff_t>(*by_groups) + 1, std::move(b));
      if (grow) {
        mbs[*by_groups].grow_into_idle_ranks(pr, estimator);
        mbs[*by_groups + 1].grow_into_idle_ranks(pr, estimator);
      }
    } else if (by_samples) {
      auto g = mbs[*by_samples].groups().front();
      const std::int32_t ga = a.open(0, g.cp);
      const std::int32_t gb = b.open(0, g.cp);
      for (std::size_t i = 0; i < g.samples.size(); ++i) {
        const std::int32_t s = g.samples[i];
        const auto us = static_cast<std::size_t>(s);
        const double c = sample_cost(pr, estimator, us, g.cp);
        if (i % 2 == 0)
          a.add(ga, s, pr.rank_tokens(us, g.cp), c);
        else
          b.add(gb, s, pr.rank_tokens(us, g.cp), c);
      }
      mbs[*by_samples] = std::move(a);
      mbs.insert(mbs.begin() + static_cast<std::ptrdiff_t>(*by_samples) + 1, std::move(b));
      if (grow) {
        mbs[*by_samples].grow_into_idle_ranks(pr, estimator);
        mbs[*by_samples + 1].grow_into_idle_ranks(pr, estimator);
      }
    } else {
      mbs.emplace_back(world);
    }
  }
}

inline plan make_plan_shell(const problem& pr, std::string_view policy) {
  plan p;
  p.world_size = pr.options.world_size;
  p.max_tokens_per_rank = pr.options.max_tokens_per_rank;
  p.lengths = pr.lengths;
  p.policy = std::string(policy);
  return p;
}

inline plan to_plan(const problem& pr, std::string_view policy,
                    const std::vector<microbatch_state>& mbs) {
  plan p = make_plan_shell(pr, policy);
  p.microbatches.reserve(mbs.size());
  for (const auto& mb : mbs)
    p.microbatches.push_back(mb.to_plan());
  return p;
}

} // namespace detail

//! Builds the plan a packing policy of your own returns from `pack` (examples/custom_packing.cpp,
//! docs/policies.md): micro-batches of groups, each group a block of ranks running samples
//! together. Every step is checked as it is taken, and a step that would make the plan invalid
//! throws dcpp::error naming the micro-batch, group, sample, value and limit: a group that is
//! not legal under the options (size, alignment, past the world), ranks already taken in that
//! micro-batch, a sample out of range or placed twice, a sample below its smallest size, a group
//! over the token budget. `finish` checks that every sample is placed and returns the plan; the
//! planner then canonicalises, evaluates and validates it as it does any policy's plan.
class plan_builder {
public:
  plan_builder(const problem& pr, std::string_view policy)
      : pr_(&pr), plan_(detail::make_plan_shell(pr, policy)), placed_(pr.size(), -1) {}

  //! Starts a micro-batch; returns its index.
  std::size_t add_microbatch() {
    plan_.microbatches.emplace_back();
    owner_.emplace_back(static_cast<std::size_t>(pr_->options.world_size), -1);
    return plan_.microbatches.size() - 1;
  }
  [[nodiscard]] std::size_t microbatches() const noexcept { return plan_.microbatches.size(); }

  //! The first legal block of `cp` ranks still free in micro-batch `mb` (lowest first rank), or
  //! nullopt when none is.
  [[nodiscard]] std::optional<std::int32_t> free_block(std::size_t mb, std::int32_t cp) const {
    check_microbatch(mb);
    const plan_options& o = pr_->options;
    if (cp < o.min_cp || cp > o.effective_max_cp() ||
        (o.group_topology != topology::contiguous && !is_legal_group(o, 0, cp)))
      return std::nullopt;
    return detail::first_free_block(owner_[mb], 0, pr_->options, cp);
  }

  //! Tokens per rank that `samples` take on a group of `cp` ranks (padding included).
  [[nodiscard]] std::int64_t rank_tokens(std::span<const std::int32_t> samples,
                                         std::int32_t cp) const {
    std::int64_t tokens = 0;
    for (const std::int32_t s : samples)
      tokens += pr_->rank_tokens(static_cast<std::size_t>(s), cp);
    return tokens;
  }

  //! Adds a group of ranks `[first_rank, first_rank + cp)` running `samples` to micro-batch `mb`.
  void add_group(std::size_t mb, std::int32_t first_rank, std::int32_t cp,
                 std::span<const std::int32_t> samples) {
    check_microbatch(mb);
    const auto where = [&] {
      return fmt::format("plan_builder: micro-batch {}, group at rank {} of {} ranks", mb,
                         first_rank, cp);
    };
    const plan_options& o = pr_->options;
    if (cp < 1 || first_rank < 0 || first_rank > o.world_size - cp ||
        !is_legal_group(o, first_rank, cp))
      throw error(status_code::invalid_plan,
                  fmt::format("{}: not a legal group (world_size = {}, cp in [{}, {}], {} "
                              "topology)",
                              where(), o.world_size, o.min_cp, o.effective_max_cp(),
                              to_string(o.group_topology)));
    for (std::int32_t r = first_rank; r < first_rank + cp; ++r)
      if (const std::int32_t g = owner_[mb][static_cast<std::size_t>(r)]; g >= 0)
        throw error(
            status_code::invalid_plan,
            fmt::format("{}: rank {} is already in group {} of this micro-batch", where(), r, g));
    if (samples.empty())
      throw error(status_code::invalid_plan, fmt::format("{}: no samples", where()));
    for (const std::int32_t s : samples) {
      if (s < 0 || static_cast<std::size_t>(s) >= pr_->size())
        throw error(status_code::invalid_plan,
                    fmt::format("{}: sample {} is not in the batch of {} samples", where(), s,
                                pr_->size()));
      const auto us = static_cast<std::size_t>(s);
      if (placed_[us] >= 0)
        throw error(
            status_code::invalid_plan,
            fmt::format("{}: sample {} is already in micro-batch {}", where(), s, placed_[us]), s);
      if (cp < pr_->min_cp_of[us])
        throw error(status_code::invalid_plan,
                    fmt::format("{}: sample {} (length {}) needs at least {} ranks", where(), s,
                                pr_->lengths[us], pr_->min_cp_of[us]),
                    s);
    }
    if (const std::int64_t tokens = rank_tokens(samples, cp); tokens > o.max_tokens_per_rank)
      throw error(status_code::invalid_plan,
                  fmt::format("{}: {} tokens per rank, over max_tokens_per_rank = {}", where(),
                              tokens, o.max_tokens_per_rank));
    const auto group = static_cast<std::int32_t>(plan_.microbatches[mb].groups.size());
    for (std::int32_t r = first_rank; r < first_rank + cp; ++r)
      owner_[mb][static_cast<std::size_t>(r)] = group;
    for (const std::int32_t s : samples)
      placed_[static_cast<std::size_t>(s)] = static_cast<std::int64_t>(mb);
    plan_group g;
    g.first_rank = first_rank;
    g.cp = cp;
    g.samples.assign(samples.begin(), samples.end());
    plan_.microbatches[mb].groups.push_back(std::move(g));
  }

  //! Whether `sample` has been placed.
  [[nodiscard]] bool placed(std::size_t sample) const { return placed_.at(sample) >= 0; }

  //! The plan; throws naming the first sample not placed.
  [[nodiscard]] plan finish() && {
    for (std::size_t s = 0; s < placed_.size(); ++s)
      if (placed_[s] < 0)
        throw error(
            status_code::invalid_plan,
            fmt::format("plan_builder: sample {} (length {}) is in no group", s, pr_->lengths[s]),
            static_cast<std::int32_t>(s));
    return std::move(plan_);
  }

private:
  void check_microbatch(std::size_t mb) const {
    if (mb >= plan_.microbatches.size())
      throw error(status_code::invalid_plan,
                  fmt::format("plan_builder: micro-batch {} does not exist ({} added)", mb,
                              plan_.microbatches.size()));
  }

  const problem* pr_;
  plan plan_;
  std::vector<std::vector<std::int32_t>> owner_; // per micro-batch: group per rank, -1 free
  std::vector<std::int64_t> placed_;             // per sample: its micro-batch, -1 not yet
};

} // namespace dcpp
