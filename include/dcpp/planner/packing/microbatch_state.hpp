// One micro-batch as the packing policies build it: its groups, their loads and tokens, and the
// ranks they own.
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
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp::detail {

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

} // namespace dcpp::detail
