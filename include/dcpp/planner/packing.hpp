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

//! First legal block of `cp` ranks that `owner` (group per rank, -1 when free) leaves free,
//! scanning upward from `lowest_free` (no free rank lies below it); nullopt if none.
inline std::optional<std::int32_t> first_free_block(std::span<const std::int32_t> owner,
                                                    std::int32_t lowest_free, const plan_options& o,
                                                    std::int32_t cp) {
  const std::int32_t step = aligned_offsets(o.group_topology) ? cp : 1;
  const auto world = static_cast<std::int32_t>(owner.size());
  std::int32_t first = lowest_free / step * step;
  while (first + cp <= world) {
    std::int32_t busy = -1;
    for (std::int32_t r = first + cp - 1; r >= first; --r)
      if (owner[static_cast<std::size_t>(r)] >= 0) {
        busy = r;
        break;
      }
    if (busy < 0)
      return first;
    first = round_up(busy + 1, step);
  }
  return std::nullopt;
}

//! Groups of one micro-batch under construction, with per-rank ownership.
class microbatch_state {
public:
  struct group {
    std::int32_t first_rank = 0;
    std::int32_t cp = 1;
    std::int64_t tokens = 0; // per rank
    double load = 0;         // per rank
    std::vector<std::int32_t> samples;
  };

  explicit microbatch_state(std::int32_t world_size)
      : owner_(static_cast<std::size_t>(world_size), -1), free_(world_size) {
    groups_.reserve(static_cast<std::size_t>(world_size)); // at most one group per rank
  }

  [[nodiscard]] std::int32_t world_size() const noexcept {
    return static_cast<std::int32_t>(owner_.size());
  }
  [[nodiscard]] std::int32_t free_ranks() const noexcept { return free_; }
  [[nodiscard]] std::vector<group>& groups() noexcept { return groups_; }
  [[nodiscard]] const std::vector<group>& groups() const noexcept { return groups_; }

  //! First legal block of `cp` free ranks, scanning upward; nullopt if none.
  [[nodiscard]] std::optional<std::int32_t> free_block(const plan_options& o,
                                                       std::int32_t cp) const {
    if (free_ < cp)
      return std::nullopt;
    return first_free_block(owner_, lowest_free_, o, cp);
  }

  //! The longest run of consecutive free ranks (0 when none is free). O(1) when the free ranks
  //! are the top ones (as groups opened lowest first leave them), else O(world).
  [[nodiscard]] std::int32_t longest_free_run() const noexcept {
    std::int32_t longest = 0, run = 0;
    if (free_ == 0 || free_ == world_size() - lowest_free_)
      return free_; // none, or every rank from the lowest free one on (one run)
    for (std::size_t r = static_cast<std::size_t>(lowest_free_); r < owner_.size(); ++r) {
      run = owner_[r] < 0 ? run + 1 : 0;
      longest = std::max(longest, run);
    }
    return longest;
  }

  //! Opens an empty group on free ranks [first, first+cp); returns its index.
  std::int32_t open(std::int32_t first, std::int32_t cp) {
    const auto index = static_cast<std::int32_t>(groups_.size());
    groups_.push_back(group{first, cp, 0, 0.0, {}});
    // room for a typical group's samples at once (growing from 1 reallocated ~4 times per group)
    groups_.back().samples.reserve(16);
    for (std::int32_t r = first; r < first + cp; ++r)
      owner_[static_cast<std::size_t>(r)] = index;
    free_ -= cp;
    while (lowest_free_ < world_size() && owner_[static_cast<std::size_t>(lowest_free_)] >= 0)
      ++lowest_free_;
    return index;
  }

  //! Frees group g's ranks and empties it; the group keeps its index with `cp` 0 (a closed
  //! group: `compact` drops it, `to_plan` skips it).
  void close(std::int32_t g) {
    auto& grp = groups_[static_cast<std::size_t>(g)];
    for (std::int32_t r = grp.first_rank; r < grp.first_rank + grp.cp; ++r)
      owner_[static_cast<std::size_t>(r)] = -1;
    free_ += grp.cp;
    lowest_free_ = std::min(lowest_free_, grp.first_rank);
    grp.cp = 0;
    grp.tokens = 0;
    grp.load = 0;
    grp.samples.clear();
  }

  void add(std::int32_t g, std::int32_t sample, std::int64_t tokens, double cost) {
    auto& grp = groups_[static_cast<std::size_t>(g)];
    grp.samples.push_back(sample);
    grp.tokens += tokens;
    grp.load += cost;
  }

  [[nodiscard]] double max_load() const noexcept {
    double m = 0;
    for (const auto& g : groups_)
      m = std::max(m, g.load);
    return m;
  }

  //! Re-places the groups largest-cp first from rank 0 (stable for equal cp). Sizes that are
  //! powers of two laid out in descending order land on aligned offsets; contiguous groups
  //! need no alignment. Free ranks end up as one run at the top.
  void compact() {
    std::erase_if(groups_, [](const group& g) { return g.cp == 0; });
    std::stable_sort(groups_.begin(), groups_.end(),
                     [](const group& a, const group& b) { return a.cp > b.cp; });
    std::fill(owner_.begin(), owner_.end(), -1);
    std::int32_t next = 0;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      groups_[g].first_rank = next;
      for (std::int32_t r = next; r < next + groups_[g].cp; ++r)
        owner_[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(g);
      next += groups_[g].cp;
    }
    free_ = world_size() - next;
    lowest_free_ = next;
  }

  //! Fills idle ranks by growing the smallest groups to the next legal size (their samples
  //! spread over more ranks), as Megatron-LM's scheduler does; stops when no group can grow.
  //! Step by step: the first group (in `compact`'s order: sizes descending, stably) of the
  //! smallest size that can grow on the free ranks grows one size and joins the end of its new
  //! size's groups. Kept per size as queues, so a step costs the sizes present rather than a
  //! sort of every group: a contiguous world grows one rank per step, up to the world's size in
  //! steps (megatron_greedy on 16,384 ranks spent most of its time re-sorting here).
  template <class Estimator>
  void grow_into_idle_ranks(const problem& pr, const Estimator& estimator) {
    compact();
    if (free_ == 0 || groups_.empty())
      return;
    std::map<std::int32_t, std::deque<std::size_t>> by_cp; // ascending size; groups in order
    for (std::size_t g = 0; g < groups_.size(); ++g)
      by_cp[groups_[g].cp].push_back(g);
    while (free_ > 0) {
      auto from = by_cp.end();
      std::int32_t next_cp = 0;
      for (auto it = by_cp.begin(); it != by_cp.end(); ++it) {
        const auto next = std::upper_bound(pr.cp_sizes.begin(), pr.cp_sizes.end(), it->first);
        if (next != pr.cp_sizes.end() && *next - it->first <= free_) {
          from = it;
          next_cp = *next;
          break;
        }
      }
      if (from == by_cp.end())
        break;
      const std::size_t g = from->second.front();
      from->second.pop_front();
      auto& grp = groups_[g];
      free_ -= next_cp - grp.cp;
      if (from->second.empty())
        by_cp.erase(from);
      grp.cp = next_cp;
      grp.tokens = 0;
      grp.load = 0;
      for (const std::int32_t s : grp.samples) {
        grp.tokens += pr.rank_tokens(static_cast<std::size_t>(s), next_cp);
        grp.load += sample_cost(pr, estimator, static_cast<std::size_t>(s), next_cp);
      }
      by_cp[next_cp].push_back(g);
    }
    // the order a stable sort by size after each step would give; compact then lays out ranks
    std::vector<group> ordered;
    ordered.reserve(groups_.size());
    for (auto it = by_cp.rbegin(); it != by_cp.rend(); ++it)
      for (const std::size_t g : it->second)
        ordered.push_back(std::move(groups_[g]));
    groups_ = std::move(ordered);
    compact();
  }

  //! Lowers the micro-batch's time with its idle ranks. While ranks are free, the critical group
  //! (the most load; the first of equals) takes the better of two steps:
  //! * grow to the smallest larger legal size that fits on the free ranks and lowers its load
  //!   (its samples spread over more ranks; under a two-tier network a size that crosses a node
  //!   may be slower and a larger one faster);
  //! * with two samples or more, shed its costliest sample into a new group of the smallest
  //!   legal size that holds it on the free ranks;
  //! the one whose two groups end with the smaller most load, if that is below the critical
  //! load (ties: the fewer ranks). Stops when neither helps, since then the micro-batch cannot
  //! get faster. The groups are laid out again by `compact` (sizes descending), which keeps
  //! aligned sizes aligned. A heap keeps a step at O(log groups + the group's samples).
  template <class Estimator>
  void grow_critical_into_idle_ranks(const problem& pr, const Estimator& estimator) {
    compact();
    if (free_ == 0 || groups_.empty())
      return;
    const auto before = [this](std::size_t a, std::size_t b) { // heap order: most load on top
      return groups_[a].load != groups_[b].load ? groups_[a].load < groups_[b].load : a > b;
    };
    std::vector<std::size_t> heap(groups_.size());
    for (std::size_t g = 0; g < heap.size(); ++g)
      heap[g] = g;
    std::make_heap(heap.begin(), heap.end(), before);
    const auto cost = [&](std::int32_t sample, std::int32_t cp) {
      return sample_cost(pr, estimator, static_cast<std::size_t>(sample), cp);
    };
    while (free_ > 0) {
      const std::size_t top = heap.front();
      const double critical = groups_[top].load;
      // grow: the smallest larger size that fits and is faster
      std::int32_t grow_to = 0;
      double grown_load = critical;
      for (auto next = std::upper_bound(pr.cp_sizes.begin(), pr.cp_sizes.end(), groups_[top].cp);
           next != pr.cp_sizes.end() && *next - groups_[top].cp <= free_; ++next) {
        double load = 0;
        for (const std::int32_t sm : groups_[top].samples)
          load += cost(sm, *next);
        if (load < critical) {
          grow_to = *next, grown_load = load;
          break;
        }
      }
      // shed: the costliest sample (the first of equals) to the smallest size that holds it
      std::int32_t shed_cp = 0;
      std::size_t shed_at = 0;
      double shed_max = critical;
      if (groups_[top].samples.size() > 1) {
        const auto& samples = groups_[top].samples;
        double costliest = -1;
        for (std::size_t k = 0; k < samples.size(); ++k)
          if (const double c = cost(samples[k], groups_[top].cp); c > costliest)
            costliest = c, shed_at = k;
        const auto sm = static_cast<std::size_t>(samples[shed_at]);
        const auto size =
            std::lower_bound(pr.cp_sizes.begin(), pr.cp_sizes.end(), pr.min_cp_of[sm]);
        if (size != pr.cp_sizes.end() && *size <= free_) {
          double rest = 0;
          for (std::size_t k = 0; k < samples.size(); ++k)
            if (k != shed_at)
              rest += cost(samples[k], groups_[top].cp);
          const double alone = cost(samples[shed_at], *size);
          if (std::max(rest, alone) < critical)
            shed_cp = *size, shed_max = std::max(rest, alone);
        }
      }
      const bool grow =
          grow_to != 0 && (shed_cp == 0 || grown_load < shed_max ||
                           (grown_load == shed_max && grow_to - groups_[top].cp <= shed_cp));
      if (grow) {
        auto& grp = groups_[top];
        free_ -= grow_to - grp.cp;
        grp.cp = grow_to;
        grp.load = grown_load;
        grp.tokens = 0;
        for (const std::int32_t sm : grp.samples)
          grp.tokens += pr.rank_tokens(static_cast<std::size_t>(sm), grow_to);
      } else if (shed_cp != 0) {
        auto& grp = groups_[top];
        const std::int32_t sm = grp.samples[shed_at];
        grp.samples.erase(grp.samples.begin() + static_cast<std::ptrdiff_t>(shed_at));
        grp.load = 0, grp.tokens = 0; // summed again, in order: no drift from subtracting
        for (const std::int32_t k : grp.samples) {
          grp.load += cost(k, grp.cp);
          grp.tokens += pr.rank_tokens(static_cast<std::size_t>(k), grp.cp);
        }
        free_ -= shed_cp;
        std::pop_heap(heap.begin(), heap.end(), before); // the lighter critical group sinks
        std::push_heap(heap.begin(), heap.end(), before);
        groups_.push_back(group{0,
                                shed_cp,
                                pr.rank_tokens(static_cast<std::size_t>(sm), shed_cp),
                                cost(sm, shed_cp),
                                {sm}});
        heap.push_back(groups_.size() - 1);
        std::push_heap(heap.begin(), heap.end(), before);
        continue;
      } else {
        break;
      }
      std::pop_heap(heap.begin(), heap.end(), before);
      std::push_heap(heap.begin(), heap.end(), before);
    }
    compact(); // lays every group out again
  }

  [[nodiscard]] plan_microbatch to_plan() const {
    plan_microbatch mb;
    for (const auto& g : groups_)
      if (!g.samples.empty())
        mb.groups.push_back(plan_group{g.first_rank, g.cp, g.samples, 0, 0.0});
    return mb;
  }

private:
  std::vector<group> groups_;
  std::vector<std::int32_t> owner_;
  std::int32_t free_ = 0;
  std::int32_t lowest_free_ = 0; // no free rank below this one
};

//! Flattens buckets into one processing order.
inline std::vector<std::int32_t> flatten(const bucket_list& buckets) {
  std::vector<std::int32_t> out;
  for (const auto& b : buckets)
    out.insert(out.end(), b.begin(), b.end());
  return out;
}

//! The samples a micro-batch-after-micro-batch policy has not placed yet, in its processing
//! order, with a search for the next one no longer than a given length. Such a policy offers
//! every remaining sample to each micro-batch in order; a sample that cannot be placed leaves
//! the micro-batch as it was, so skipping samples that cannot fit changes nothing. The search
//! makes the skip cheap: a min-tree over blocks of `block` positions (a block's least remaining
//! length) finds the next candidate in O(block + log n), where offering every sample to every
//! micro-batch cost samples x micro-batches.
class remaining_samples {
public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  remaining_samples(const problem& pr, std::vector<std::int32_t> order)
      : order_(std::move(order)), length_(order_.size()), left_(order_.size()) {
    for (std::size_t k = 0; k < order_.size(); ++k)
      length_[k] = pr.lengths[static_cast<std::size_t>(order_[k])];
    const std::size_t blocks = (order_.size() + block - 1) / block;
    leaves_ = std::bit_ceil(std::max<std::size_t>(blocks, 1));
    tree_.assign(2 * leaves_, placed);
    for (std::size_t b = 0; b < blocks; ++b)
      tree_[leaves_ + b] = block_min(b);
    for (std::size_t n = leaves_ - 1; n >= 1; --n)
      tree_[n] = std::min(tree_[2 * n], tree_[2 * n + 1]);
  }

  [[nodiscard]] bool empty() const noexcept { return left_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return order_.size(); }
  [[nodiscard]] std::int32_t sample(std::size_t k) const { return order_[k]; }
  [[nodiscard]] bool taken(std::size_t k) const { return length_[k] == placed; }

  //! The first remaining position at or after `from` whose length is at most `limit`; npos if
  //! none.
  [[nodiscard]] std::size_t next(std::size_t from, std::int64_t limit) const {
    if (from >= order_.size())
      return npos;
    limit = std::min(limit, placed - 1);
    std::size_t b = from / block;
    if (const std::size_t k = scan(b, from, limit); k != npos)
      return k;
    // the next block after b holding a length <= limit: up from b's leaf while it is a right
    // child or its right sibling has none, then down to the leftmost such leaf
    std::size_t n = leaves_ + b;
    while (true) {
      if (n == 1)
        return npos;
      if (n % 2 == 0 && tree_[n + 1] <= limit) {
        n = n + 1;
        break;
      }
      n /= 2;
    }
    while (n < leaves_)
      n = tree_[2 * n] <= limit ? 2 * n : 2 * n + 1;
    b = n - leaves_;
    return scan(b, b * block, limit);
  }

  //! Marks position `k` placed.
  void remove(std::size_t k) {
    DCPP_EXPECTS(k < order_.size() && length_[k] != placed);
    length_[k] = placed;
    --left_;
    std::size_t n = leaves_ + k / block;
    tree_[n] = block_min(k / block);
    for (n /= 2; n >= 1; n /= 2)
      tree_[n] = std::min(tree_[2 * n], tree_[2 * n + 1]);
  }

private:
  static constexpr std::size_t block = 32;
  static constexpr std::int64_t placed = std::numeric_limits<std::int64_t>::max();

  [[nodiscard]] std::int64_t block_min(std::size_t b) const {
    std::int64_t m = placed;
    for (std::size_t k = b * block; k < std::min(order_.size(), (b + 1) * block); ++k)
      m = std::min(m, length_[k]);
    return m;
  }
  [[nodiscard]] std::size_t scan(std::size_t b, std::size_t from, std::int64_t limit) const {
    for (std::size_t k = from; k < std::min(order_.size(), (b + 1) * block); ++k)
      if (length_[k] <= limit) // placed positions hold the largest value: never <= a limit
        return k;              // below it
    return npos;
  }

  std::vector<std::int32_t> order_;
  std::vector<std::int64_t> length_; // `placed` once placed
  std::size_t left_;
  std::size_t leaves_ = 1;
  std::vector<std::int64_t> tree_; // tree_[leaves_ + b]: block b's least remaining length
};

//! The longest sample of `length` tokens or fewer that fits `room` free tokens per rank on `cp`
//! ranks is the last length of `room / (2 unit)` whole padding chunks of 2 cp unit: a sample
//! longer than this puts more than `room` tokens on each rank (`tokens_per_rank`). -1 when
//! nothing fits (a negative room, or no ranks).
inline std::int64_t longest_fitting(const plan_options& o, std::int64_t room, std::int32_t cp) {
  if (room < 0 || cp < 1)
    return -1;
  return room / (2 * o.padding_unit) * 2 * o.padding_unit * cp;
}

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
