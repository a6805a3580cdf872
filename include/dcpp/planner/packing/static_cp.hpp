// static_cp: one fixed CP size for every sample, packed to the token budget.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/util/indexed_heap.hpp"

namespace dcpp {

namespace detail {

//! static_cp's slots by (load, slot): the first `width` of them (the window) in a sorted array
//! with their tokens, the others in a heap. The least-loaded window slot with room for a sample
//! is then a scan of that array, where a std::set of every slot (and of their tokens) dominated
//! the planning time of large batches: most samples of a long tail find no room in the window
//! (its slots light, their tokens spent on short samples), and every placement moved two set
//! nodes.
class load_window {
public:
  //! Every slot at its (load, tokens), by slot index (more than `width` slots).
  template <class Slots>
  void reset(const Slots& slots, std::size_t width) {
    DCPP_EXPECTS(width > 0 && slots.size() > width);
    width_ = width;
    loads_.resize(slots.size());
    tokens_.resize(slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) {
      loads_[i] = slots[i].load;
      tokens_[i] = slots[i].tokens;
    }
    rebuild();
  }
  //! Slot `id` now at `load` and `tokens`.
  void update(std::int32_t id, double load, std::int64_t tokens) {
    const auto uid = static_cast<std::size_t>(id);
    const bool lower = load < loads_[uid];
    loads_[uid] = load;
    tokens_[uid] = tokens;
    if (lower) { // a sample of negative cost (outside the estimator contract): anew
      rebuild();
      return;
    }
    if (!in_window_[uid]) { // after the window before, and after it still
      rest_.set(load, id);
      return;
    }
    // most placements go to the window's first slot: found from the front
    window_.erase(
        std::find_if(window_.begin(), window_.end(), [&](const member& m) { return m.id == id; }));
    member m{load, tokens, id};
    if (const auto first = rest_.top(); first && *first < m.key()) {
      // it leaves the window, and the first slot after it enters
      rest_.erase(first->second);
      rest_.set(load, id);
      in_window_[uid] = false;
      in_window_[static_cast<std::size_t>(first->second)] = true;
      m = {first->first, tokens_[static_cast<std::size_t>(first->second)], first->second};
    }
    window_.insert(
        std::upper_bound(window_.begin(), window_.end(), m,
                         [](const member& a, const member& b) { return a.key() < b.key(); }),
        m);
  }
  //! The least-loaded window slot (by load, then index) with `room` tokens more; -1: none.
  [[nodiscard]] std::int32_t first_with_room(std::int64_t room) const {
    for (const member& m : window_)
      if (m.tokens <= room)
        return m.id;
    return -1;
  }

private:
  struct member {
    double load = 0;
    std::int64_t tokens = 0;
    std::int32_t id = 0;
    //! The window's order, as the heap's entries: by load, then slot.
    [[nodiscard]] std::pair<double, std::int32_t> key() const noexcept { return {load, id}; }
  };
  void rebuild() {
    rest_.clear();
    window_.clear();
    in_window_.assign(loads_.size(), false);
    for (std::size_t i = 0; i < loads_.size(); ++i)
      rest_.set(loads_[i], static_cast<std::int32_t>(i));
    while (window_.size() < width_) {
      const auto first = *rest_.top();
      rest_.erase(first.second);
      in_window_[static_cast<std::size_t>(first.second)] = true;
      window_.push_back(
          {first.first, tokens_[static_cast<std::size_t>(first.second)], first.second});
    }
  }
  std::size_t width_ = 1;
  std::vector<double> loads_;
  std::vector<std::int64_t> tokens_;
  std::vector<bool> in_window_;
  std::vector<member> window_; // ascending (load, slot)
  indexed_heap<double> rest_;  // (load, slot) of the slots after the window
};

} // namespace detail

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
    if (cp < 0) // resolve would take it for 0
      return status::failure(status_code::invalid_option,
                             fmt::format("static cp = {} must be >= 0 (0: the smallest legal "
                                         "size that fits every sample)",
                                         cp));
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
    // among the first `tries`, and the roomiest has room only if some slot has); past that, the
    // window of the `tries` least-loaded slots knows whether one has room (the scan then finds
    // it), and a heap keeps the slots by tokens.
    constexpr std::size_t tries = 64;
    detail::load_window window;
    detail::indexed_heap<std::int64_t> by_tokens; // (tokens, slot): most room first
    bool indexed = false;
    auto add_microbatches = [&](std::int32_t count) {
      const std::size_t from = slots.size();
      slots.resize(slots.size() + static_cast<std::size_t>(count) * groups_per_mb);
      if (slots.size() <= tries)
        return;
      window.reset(slots, tries);
      for (std::size_t i = indexed ? from : 0; i < slots.size(); ++i)
        by_tokens.set(slots[i].tokens, static_cast<std::int32_t>(i));
      indexed = true;
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
      if (const std::int32_t id = window.first_with_room(room); id >= 0)
        return id;
      return by_tokens.top()->first <= room ? by_tokens.top()->second : -1;
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
      sl.samples.push_back(sample);
      sl.tokens += tokens;
      sl.load += cost[s];
      if (indexed) {
        window.update(chosen, sl.load, sl.tokens);
        by_tokens.set(sl.tokens, chosen);
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
