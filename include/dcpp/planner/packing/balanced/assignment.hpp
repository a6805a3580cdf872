// The state every balanced construction returns and the local search changes: rounds of groups
// (each round a `microbatch_state`), groups named by id across rounds, and each sample's group,
// CP size and cost there.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "dcpp/core/math.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/util/indexed_heap.hpp"

namespace dcpp::detail {

//! Samples assigned to groups, groups to rounds. Group ids count up from 0 in the order groups
//! are opened and are never reused; a group closes when its last sample leaves (its ranks are
//! free again). Invariants, kept by every change (and checked by `consistent`):
//! * a group's `tokens` is the sum of its samples' rank tokens at its size, its `load` the sum
//!   of their costs there (`cost_of`), in list order; `max_load(m)` is round m's largest load;
//! * every sample placed is in exactly one group, `group_of` names it, `cp_of` is its size.
template <workload_estimator Estimator>
class assignment {
public:
  using group = microbatch_state::group;

  //! `rounds` empty rounds; `sizes` holds each sample's size and cost until it is placed.
  assignment(const cost_rows<Estimator>& costs, std::int32_t rounds, sample_sizes sizes)
      : costs_(&costs), sizes_(std::move(sizes)),
        group_of_(static_cast<std::size_t>(costs.samples()), -1) {
    DCPP_EXPECTS(sizes_.cp.size() == static_cast<std::size_t>(costs.samples()));
    rounds_.reserve(static_cast<std::size_t>(rounds));
    for (std::int32_t m = 0; m < rounds; ++m)
      rounds_.emplace_back(costs.world());
    ids_.resize(static_cast<std::size_t>(rounds));
    max_.assign(static_cast<std::size_t>(rounds), 0.0);
    for (std::int32_t m = 0; m < rounds; ++m)
      room_.set(-costs.world(), m);
  }

  //! The plan's groups, in its order (ids follow it), each sample at its group's size.
  static assignment from_plan(const cost_rows<Estimator>& costs, const plan& p) {
    return from_microbatches(costs, p.microbatches);
  }

  //! The same for a plan's rounds.
  static assignment from_microbatches(const cost_rows<Estimator>& costs,
                                      std::span<const plan_microbatch> rounds) {
    sample_sizes unplaced;
    unplaced.cp.assign(static_cast<std::size_t>(costs.samples()), 0);
    unplaced.cost.assign(static_cast<std::size_t>(costs.samples()), 0.0);
    assignment a(costs, static_cast<std::int32_t>(rounds.size()), std::move(unplaced));
    for (std::size_t m = 0; m < rounds.size(); ++m)
      for (const auto& g : rounds[m].groups) {
        const std::int32_t id = a.open(static_cast<std::int32_t>(m), g.first_rank, g.cp);
        a.mutable_group(id).samples.reserve(g.samples.size());
        for (const std::int32_t s : g.samples)
          a.insert(id, s);
      }
    return a;
  }

  //! Takes over rounds built elsewhere (their groups' tokens kept, loads summed again from
  //! `sizes`, which must hold every sample at its group's size); empty groups are dropped.
  static assignment from_rounds(const cost_rows<Estimator>& costs,
                                std::vector<microbatch_state> rounds, sample_sizes sizes) {
    assignment a(costs, 0, std::move(sizes));
    a.rounds_ = std::move(rounds);
    const auto k = a.rounds_.size();
    a.ids_.resize(k);
    a.max_.assign(k, 0.0);
    for (std::size_t m = 0; m < k; ++m) {
      auto& round = a.rounds_[m];
      auto& ids = a.ids_[m];
      for (std::size_t i = 0; i < round.groups().size(); ++i) {
        group& g = round.groups()[i];
        if (g.samples.empty()) {
          round.close(static_cast<std::int32_t>(i));
          ids.push_back(-1);
          continue;
        }
        const auto id = static_cast<std::int32_t>(a.where_.size());
        a.where_.emplace_back(static_cast<std::int32_t>(m), static_cast<std::int32_t>(i));
        ids.push_back(id);
        double load = 0;
        for (const std::int32_t s : g.samples) {
          const auto us = static_cast<std::size_t>(s);
          DCPP_EXPECTS(a.sizes_.cp[us] == g.cp);
          a.group_of_[us] = id;
          load += a.sizes_.cost[us];
        }
        g.load = load;
      }
      a.room_.set(-round.free_ranks(), static_cast<std::int32_t>(m));
      a.refresh_max(static_cast<std::int32_t>(m));
    }
    return a;
  }

  [[nodiscard]] const cost_rows<Estimator>& costs() const noexcept { return *costs_; }
  [[nodiscard]] std::int32_t rounds() const noexcept {
    return static_cast<std::int32_t>(rounds_.size());
  }
  [[nodiscard]] std::int32_t group_ids() const noexcept {
    return static_cast<std::int32_t>(where_.size());
  }
  [[nodiscard]] const group& group_at(std::int32_t id) const {
    const auto [m, i] = where_[static_cast<std::size_t>(id)];
    return rounds_[static_cast<std::size_t>(m)].groups()[static_cast<std::size_t>(i)];
  }
  [[nodiscard]] std::int32_t round_of(std::int32_t id) const {
    return where_[static_cast<std::size_t>(id)].first;
  }
  //! Group id's place in its round's list: the order it was opened in among the round's groups
  //! (ids ascend with it), and the id at place `slot` of round m (-1: never a group).
  [[nodiscard]] std::int32_t slot_of(std::int32_t id) const {
    return where_[static_cast<std::size_t>(id)].second;
  }
  [[nodiscard]] std::int32_t id_at(std::int32_t m, std::int32_t slot) const {
    return ids_[static_cast<std::size_t>(m)][static_cast<std::size_t>(slot)];
  }
  [[nodiscard]] bool open_group(std::int32_t id) const { return group_at(id).cp > 0; }
  //! Calls f(id) for each open group of round m, in the order they were opened.
  template <class F>
  void for_each_group(std::int32_t m, F&& f) const {
    for (const std::int32_t id : ids_[static_cast<std::size_t>(m)])
      if (id >= 0 && open_group(id))
        f(id);
  }

  [[nodiscard]] std::int32_t cp_of(std::int32_t s) const {
    return sizes_.cp[static_cast<std::size_t>(s)];
  }
  [[nodiscard]] double cost_of(std::int32_t s) const {
    return sizes_.cost[static_cast<std::size_t>(s)];
  }
  [[nodiscard]] std::int32_t group_of(std::int32_t s) const {
    return group_of_[static_cast<std::size_t>(s)];
  }

  [[nodiscard]] double max_load(std::int32_t m) const { return max_[static_cast<std::size_t>(m)]; }
  //! Sum over rounds of the largest load, plus the estimator's overhead per round.
  [[nodiscard]] double step_time() const {
    double total = static_cast<double>(rounds()) * costs_->overhead();
    for (const double m : max_)
      total += m;
    return total;
  }

  //! Walks the rounds by free ranks, most first (then by round), calling f(free, m) until it
  //! returns true.
  template <class F>
  void by_free_ranks(F&& f) {
    room_.visit(rounds(), [&](const auto& e) { return f(-e.first, e.second); });
  }
  //! First legal block of `cp` free ranks in round m.
  [[nodiscard]] std::optional<std::int32_t> free_block(std::int32_t m, std::int32_t cp) const {
    return rounds_[static_cast<std::size_t>(m)].free_block(costs_->options(), cp);
  }

  //! Appends an empty round (no groups, every rank free).
  void add_round() {
    const auto m = static_cast<std::int32_t>(rounds_.size());
    rounds_.emplace_back(costs_->world());
    ids_.emplace_back();
    max_.push_back(0.0);
    room_.set(-costs_->world(), m);
  }
  //! Whether round m holds no group.
  [[nodiscard]] bool empty_round(std::int32_t m) const {
    return rounds_[static_cast<std::size_t>(m)].free_ranks() == costs_->world();
  }
  //! How many rounds hold a group.
  [[nodiscard]] std::int32_t used_rounds() const {
    std::int32_t used = 0;
    for (std::int32_t m = 0; m < rounds(); ++m)
      used += empty_round(m) ? 0 : 1;
    return used;
  }

  //! Opens an empty group of `cp` ranks from `first` in round m; returns its id.
  std::int32_t open(std::int32_t m, std::int32_t first, std::int32_t cp) {
    auto& round = rounds_[static_cast<std::size_t>(m)];
    const auto id = static_cast<std::int32_t>(where_.size());
    where_.emplace_back(m, round.open(first, cp));
    ids_[static_cast<std::size_t>(m)].push_back(id);
    room_.set(-round.free_ranks(), m);
    return id;
  }

  //! Puts sample s into group id at the group's size.
  void insert(std::int32_t id, std::int32_t s) {
    group& g = mutable_group(id);
    const auto us = static_cast<std::size_t>(s);
    sizes_.cp[us] = g.cp;
    sizes_.cost[us] = costs_->cost(s, g.cp);
    g.samples.push_back(s);
    g.tokens += costs_->tokens(s, g.cp);
    group_of_[us] = id;
    g.load = g.load + sizes_.cost[us];
    auto& mx = max_[static_cast<std::size_t>(round_of(id))];
    mx = std::max(mx, g.load);
  }

  //! Takes sample s out of group id (closed when it empties). s may already sit in another
  //! group too (a swap in progress): then only id's list, tokens and load change. `others`,
  //! where the caller knows it: the largest load of the round's other groups (0: none), from
  //! which the round's maximum follows without a scan of the round.
  void remove(std::int32_t id, std::int32_t s, std::optional<double> others = std::nullopt) {
    group& g = mutable_group(id);
    const auto us = static_cast<std::size_t>(s);
    g.samples.erase(std::find(g.samples.begin(), g.samples.end(), s));
    g.tokens -= costs_->tokens(s, g.cp);
    const double before = g.load;
    if (group_of_[us] == id)
      group_of_[us] = -1;
    const auto [m, i] = where_[static_cast<std::size_t>(id)];
    if (g.samples.empty()) {
      rounds_[static_cast<std::size_t>(m)].close(i);
      room_.set(-rounds_[static_cast<std::size_t>(m)].free_ranks(), m);
    } else {
      // summed again rather than subtracted: loads stay exact sums, whatever the history
      double load = 0;
      for (const auto t : g.samples)
        load += sizes_.cost[static_cast<std::size_t>(t)];
      g.load = load;
    }
    // the costs are >= 0 and rounding is monotone, so the sum without s is at most the sum with
    // it: below the maximum before, the group leaves it to another, unchanged, group
    double& mx = max_[static_cast<std::size_t>(m)];
    if (others)
      mx = g.samples.empty() ? *others : std::max(*others, g.load);
    else if (before >= mx)
      refresh_max(m);
  }

  //! The plan of this state, each group's samples ascending.
  [[nodiscard]] plan to_plan(std::string_view policy) const {
    plan p = make_plan_shell(costs_->batch(), policy);
    p.microbatches.resize(rounds_.size());
    std::vector<std::size_t> slot(where_.size(), 0);   // group id -> index in its round's list
    std::vector<std::size_t> filled(where_.size(), 0); // group id -> samples written
    for (std::size_t m = 0; m < rounds_.size(); ++m)
      for_each_group(static_cast<std::int32_t>(m), [&](std::int32_t id) {
        const group& g = group_at(id);
        auto& list = p.microbatches[m].groups;
        slot[static_cast<std::size_t>(id)] = list.size();
        list.push_back(
            plan_group{g.first_rank, g.cp, std::vector<std::int32_t>(g.samples.size()), 0, 0.0});
      });
    // each group's samples in batch order, written by index (push_back, out of line, cost a
    // tenth of this function on 4,096 samples)
    for (std::int32_t s = 0; s < costs_->samples(); ++s) {
      const auto id = static_cast<std::size_t>(group_of(s));
      DCPP_EXPECTS(group_of(s) >= 0); // every sample has a group
      std::vector<std::int32_t>& out =
          p.microbatches[static_cast<std::size_t>(round_of(group_of(s)))].groups[slot[id]].samples;
      DCPP_EXPECTS(filled[id] < out.size()); // as many as its list holds
      out[filled[id]++] = s;
    }
    return p;
  }

  //! Whether the invariants hold (for tests: O(samples x sizes)).
  [[nodiscard]] bool consistent() const {
    std::vector<std::int32_t> seen(static_cast<std::size_t>(costs_->samples()), -1);
    for (std::int32_t m = 0; m < rounds(); ++m) {
      double mx = 0;
      bool ok = true;
      for_each_group(m, [&](std::int32_t id) {
        const group& g = group_at(id);
        std::int64_t tokens = 0;
        double load = 0;
        for (const std::int32_t s : g.samples) {
          const auto us = static_cast<std::size_t>(s);
          ok = ok && seen[us] < 0 && group_of_[us] == id && sizes_.cp[us] == g.cp &&
               sizes_.cost[us] == costs_->cost(s, g.cp);
          seen[us] = id;
          tokens += costs_->tokens(s, g.cp);
          load += sizes_.cost[us];
        }
        ok = ok && !g.samples.empty() && tokens == g.tokens && load == g.load &&
             g.tokens <= costs_->budget();
        mx = std::max(mx, g.load);
      });
      if (!ok || mx != max_load(m))
        return false;
    }
    for (std::size_t s = 0; s < seen.size(); ++s)
      if (seen[s] != group_of_[s])
        return false;
    return true;
  }

private:
  group& mutable_group(std::int32_t id) {
    const auto [m, i] = where_[static_cast<std::size_t>(id)];
    return rounds_[static_cast<std::size_t>(m)].groups()[static_cast<std::size_t>(i)];
  }
  void refresh_max(std::int32_t m) {
    double mx = 0;
    for_each_group(m, [&](std::int32_t id) { mx = std::max(mx, mutable_group(id).load); });
    max_[static_cast<std::size_t>(m)] = mx;
  }

  const cost_rows<Estimator>* costs_;
  sample_sizes sizes_;
  std::vector<std::int32_t> group_of_;                       // per sample: group id or -1
  std::vector<microbatch_state> rounds_;                     // the groups, round by round
  std::vector<std::pair<std::int32_t, std::int32_t>> where_; // id -> (round, index in round)
  std::vector<std::vector<std::int32_t>> ids_;               // round, index -> id (-1: never one)
  std::vector<double> max_;                                  // per round: the largest load
  indexed_heap<std::int32_t> room_;                          // (-free ranks, round)
};

//! Rounds `a` leaves empty (the local search moves every sample out of a round where that pays;
//! the chunked construction's rounds may hold nothing but what it moves) dropped, as many as keep
//! the count a multiple of `multiple`: each costs the micro-batch overhead and holds nothing.
template <class Estimator>
void drop_empty_rounds(assignment<Estimator>& a, const cost_rows<Estimator>& costs,
                       std::int32_t multiple, std::string_view policy) {
  const std::int32_t used = a.used_rounds();
  std::int32_t drop = a.rounds() - round_up<std::int32_t>(used, multiple);
  if (used == 0 || drop <= 0)
    return;
  plan p = a.to_plan(policy);
  std::erase_if(p.microbatches,
                [&](const plan_microbatch& mb) { return mb.groups.empty() && drop-- > 0; });
  a = assignment<Estimator>::from_plan(costs, p);
}

//! The same on plan `p` of step time `step` (where the tile exchange left a round empty), both
//! updated; nothing where no round is empty.
template <class Estimator>
void drop_empty_rounds(plan& p, double& step, const cost_rows<Estimator>& costs,
                       std::int32_t multiple, std::string_view policy) {
  if (std::ranges::none_of(p.microbatches,
                           [](const plan_microbatch& mb) { return mb.groups.empty(); }))
    return;
  assignment<Estimator> a = assignment<Estimator>::from_plan(costs, p);
  drop_empty_rounds(a, costs, multiple, policy);
  step = a.step_time();
  p = a.to_plan(policy);
}

} // namespace dcpp::detail
