// Every rank busy in every micro-batch: what the megatron topology promises Megatron-LM's and
// verl's consumers, which index the first sample of every rank's list.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

//! Whether a batch of `samples` can keep every rank busy in every micro-batch of a plan under
//! `o`, as far as the count alone tells: a plan has at least `microbatch_multiple` micro-batches,
//! each needs a sample. Success for every topology but megatron.
inline status check_occupiable(const plan_options& o, std::size_t samples) noexcept {
  if (o.group_topology == topology::megatron && std::cmp_less(samples, o.microbatch_multiple))
    return status::failure(status_code::infeasible,
                           fmt::format("the batch holds {} samples, fewer than microbatch_multiple "
                                       "= {}: in the megatron topology every rank runs a sample "
                                       "in every micro-batch",
                                       samples, o.microbatch_multiple));
  return status::success();
}

namespace detail {

//! One micro-batch's groups as the filling sees them: sizes, samples, per-rank loads and tokens.
//! Positions are laid out at the end (`lay_out`), largest group first.
template <workload_estimator Estimator>
class occupier {
public:
  occupier(plan& p, const problem& pr, const Estimator& estimator)
      : plan_(&p), pr_(&pr), estimator_(&estimator) {
    const plan_options& o = pr.options;
    for (const std::int32_t c : pr.cp_sizes)
      if (c != o.world_size)
        splittable_sizes_.push_back(c); // powers of two below the largest one <= world_size
    full_legal_ = !pr.cp_sizes.empty() && pr.cp_sizes.back() == o.world_size;
  }

  //! Fills every micro-batch; throws dcpp::error where the batch cannot keep every rank busy.
  void run() {
    auto& mbs = plan_->microbatches;
    const std::size_t samples = pr_->size();
    if (samples < mbs.size())
      throw error(status_code::infeasible,
                  fmt::format("the plan needs {} micro-batches (a multiple of microbatch_multiple "
                              "= {}) but the batch holds {} samples: in the megatron topology "
                              "every rank runs a sample in every micro-batch",
                              mbs.size(), pr_->options.microbatch_multiple, samples));
    changed_.assign(mbs.size(), false);
    for (auto& mb : mbs)
      for (auto& g : mb.groups)
        refresh(g); // the loads every move is priced by
    // empty micro-batches first: they take samples (or whole groups) from the others, which
    // may leave those with idle ranks, filled below
    for (std::size_t m = 0; m < mbs.size(); ++m)
      if (mbs[m].groups.empty())
        fill(m);
    for (std::size_t m = 0; m < mbs.size(); ++m)
      if (deficit(m) > 0)
        fill(m);
    // a group that sets its micro-batch's time on more ranks than pays (faster on half of
    // them) gives the half back, and the ranks it leaves are filled by the cheapest move: kept
    // while the step gets faster
    for (std::size_t m = 0; m < mbs.size(); ++m)
      while (can_shrink(m)) {
        const std::vector<plan_microbatch> before = mbs;
        const std::vector<bool> changed_before = changed_;
        const double step = step_time();
        shrink(m);
        fill(m);
        if (step_time() < step)
          continue;
        mbs = before;
        changed_ = changed_before;
        break;
      }
    for (std::size_t m = 0; m < mbs.size(); ++m)
      if (changed_[m])
        lay_out(m);
  }

private:
  using group = plan_group;

  [[nodiscard]] double cost(std::int32_t s, std::int32_t cp) const {
    return sample_cost(*pr_, *estimator_, static_cast<std::size_t>(s), cp);
  }
  [[nodiscard]] std::int64_t tokens(std::int32_t s, std::int32_t cp) const {
    return pr_->rank_tokens(static_cast<std::size_t>(s), cp);
  }
  [[nodiscard]] double load(const group& g, std::int32_t cp) const {
    double t = 0;
    for (const std::int32_t s : g.samples)
      t += cost(s, cp);
    return t;
  }
  [[nodiscard]] std::int64_t group_tokens(const group& g, std::int32_t cp) const {
    std::int64_t t = 0;
    for (const std::int32_t s : g.samples)
      t += tokens(s, cp);
    return t;
  }
  [[nodiscard]] std::int32_t deficit(std::size_t m) const {
    std::int64_t used = 0;
    for (const group& g : plan_->microbatches[m].groups)
      used += g.cp;
    return static_cast<std::int32_t>(pr_->options.world_size - used);
  }
  //! A micro-batch's two largest group times, to price a change of one group in O(1).
  struct slowest_two {
    double first = 0, second = 0;
    std::size_t at = 0;
    //! The micro-batch's time with group `g` at `replaced` instead.
    [[nodiscard]] double with(std::size_t g, double replaced) const {
      return std::max(replaced, g == at ? second : first);
    }
  };
  [[nodiscard]] slowest_two slowest_of(std::size_t m) const {
    slowest_two t;
    const auto& groups = plan_->microbatches[m].groups;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].time > t.first)
        t.second = t.first, t.first = groups[g].time, t.at = g;
      else
        t.second = std::max(t.second, groups[g].time);
    }
    return t;
  }

  //! A way to take `ranks` more of micro-batch m's idle ranks, and what it changes the step by.
  struct move {
    enum kind_t : std::uint8_t { grow, split, full, pull, pull_group } kind = grow;
    double delta = std::numeric_limits<double>::infinity();
    std::size_t g = 0;               // grow, split: the group
    std::int32_t size = 0;           // split, pull: the new group's size
    std::vector<std::int32_t> moved; // split: the samples that move to the new group
    std::size_t donor_mb = 0, donor_g = 0;
    std::int32_t sample = -1; // pull: the sample taken
  };

  static move make(typename move::kind_t kind, double delta, std::size_t g = 0,
                   std::int32_t size = 0) {
    move m;
    m.kind = kind, m.delta = delta, m.g = g, m.size = size;
    return m;
  }

  void consider(move& best, move&& candidate) const {
    if (candidate.delta < best.delta)
      best = std::move(candidate);
  }

  //! Samples of group `g` (at its size) that a new group of `size` ranks takes, so that both
  //! groups' larger load is least (costliest first, each to the side it loads least within the
  //! budget and the sample's smallest size); empty when no split leaves both sides a sample.
  [[nodiscard]] std::vector<std::int32_t> split_of(const group& g, std::int32_t size,
                                                   double& kept_load, double& new_load) const {
    std::vector<std::int32_t> order = g.samples;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int32_t a, std::int32_t b) { return cost(a, g.cp) > cost(b, g.cp); });
    const std::int64_t budget = pr_->options.max_tokens_per_rank;
    std::vector<std::int32_t> moved;
    double a = 0, b = 0;
    std::int64_t ta = 0, tb = 0;
    std::size_t kept = 0;
    for (const std::int32_t s : order) {
      const bool may_move =
          pr_->min_cp_of[static_cast<std::size_t>(s)] <= size && tb + tokens(s, size) <= budget;
      const bool may_keep = ta + tokens(s, g.cp) <= budget;
      const double if_kept = std::max(a + cost(s, g.cp), b);
      const double if_moved = may_move ? std::max(a, b + cost(s, size)) : if_kept + 1;
      if (may_move && (!may_keep || if_moved < if_kept)) {
        moved.push_back(s);
        b += cost(s, size), tb += tokens(s, size);
      } else if (may_keep) {
        a += cost(s, g.cp), ta += tokens(s, g.cp), ++kept;
      } else {
        return {};
      }
    }
    if (moved.empty() || kept == 0)
      return {};
    kept_load = a, new_load = b;
    return moved;
  }

  //! The best way to take more of micro-batch m's idle ranks (`idle` of them), by the step time
  //! it adds; an infinite delta when there is none.
  [[nodiscard]] move best_move(std::size_t m, std::int32_t idle) const {
    const plan_options& o = pr_->options;
    const auto& groups = plan_->microbatches[m].groups;
    const slowest_two here = slowest_of(m);
    const double now = here.first;
    move best;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const group& gr = groups[g];
      // grow: double the group onto idle ranks (fewer tokens per rank, never more)
      if (gr.cp <= idle && is_legal_group(o, 0, 2 * gr.cp))
        consider(best, make(move::grow, here.with(g, load(gr, 2 * gr.cp)) - now, g));
      // split: some of its samples to a new group on idle ranks
      if (gr.samples.size() >= 2)
        for (const std::int32_t size : splittable_sizes_) {
          if (size > idle)
            break;
          double kept = 0, moved_load = 0;
          auto moved = split_of(gr, size, kept, moved_load);
          if (moved.empty())
            continue;
          move mv = make(move::split, std::max(here.with(g, kept), moved_load) - now, g, size);
          mv.moved = std::move(moved);
          consider(best, std::move(mv));
        }
    }
    // full: every sample of the micro-batch on the group of all ranks
    if (full_legal_ && !groups.empty()) {
      double t = 0;
      std::int64_t tk = 0;
      for (const group& gr : groups) {
        t += load(gr, o.world_size);
        tk += group_tokens(gr, o.world_size);
      }
      if (tk <= o.max_tokens_per_rank)
        consider(best, make(move::full, t - now));
    }
    // pull: a sample of another micro-batch's group of two or more, onto a new group here
    const auto& mbs = plan_->microbatches;
    for (std::size_t d = 0; d < mbs.size(); ++d) {
      if (d == m)
        continue;
      const slowest_two donor = slowest_of(d);
      const double donor_now = donor.first;
      for (std::size_t dg = 0; dg < mbs[d].groups.size(); ++dg) {
        const group& gr = mbs[d].groups[dg];
        if (gr.samples.size() < 2 && !(groups.empty() && mbs[d].groups.size() >= 2))
          continue;
        if (gr.samples.size() < 2) {
          // an empty micro-batch may take a whole group of one sample from a micro-batch of two
          // or more groups (whose ranks that leaves idle are filled in turn)
          const std::int32_t s = gr.samples.front();
          for (const std::int32_t size : splittable_sizes_) {
            if (size > idle)
              break;
            if (pr_->min_cp_of[static_cast<std::size_t>(s)] > size)
              continue;
            move mv = make(move::pull_group, cost(s, size) - now + donor.with(dg, 0.0) - donor_now);
            mv.size = size, mv.donor_mb = d, mv.donor_g = dg, mv.sample = s;
            consider(best, std::move(mv));
            break; // its smallest size: the rest of the ranks are filled by growing
          }
          continue;
        }
        for (const std::int32_t s : gr.samples) {
          const double donor_after = donor.with(dg, gr.time - cost(s, gr.cp)) - donor_now;
          for (const std::int32_t size : splittable_sizes_) {
            if (size > idle)
              break;
            if (pr_->min_cp_of[static_cast<std::size_t>(s)] > size)
              continue;
            move mv = make(move::pull, std::max(now, cost(s, size)) - now + donor_after);
            mv.size = size, mv.donor_mb = d, mv.donor_g = dg, mv.sample = s;
            consider(best, std::move(mv));
          }
        }
      }
    }
    return best;
  }

  void refresh(group& g) const {
    g.time = load(g, g.cp);
    g.tokens = group_tokens(g, g.cp);
  }

  //! The plan's step time (without overheads: the count of micro-batches stays).
  [[nodiscard]] double step_time() const {
    double t = 0;
    for (std::size_t m = 0; m < plan_->microbatches.size(); ++m)
      t += slowest_of(m).first;
    return t;
  }

  //! True when micro-batch m's slowest group is faster on half its ranks (a legal size at the
  //! same first rank, holding its samples within the budget).
  [[nodiscard]] bool can_shrink(std::size_t m) const {
    const auto& groups = plan_->microbatches[m].groups;
    if (groups.empty())
      return false;
    const group& g = groups[slowest_of(m).at];
    const std::int32_t half = g.cp / 2;
    if (g.cp == pr_->options.world_size && !is_power_of_two(g.cp))
      return false; // the group of all ranks has no legal half
    if (half < 1 || !is_legal_group(pr_->options, g.first_rank, half) ||
        group_tokens(g, half) > pr_->options.max_tokens_per_rank ||
        std::any_of(g.samples.begin(), g.samples.end(), [&](std::int32_t s) {
          return pr_->min_cp_of[static_cast<std::size_t>(s)] > half;
        }))
      return false;
    return load(g, half) < g.time;
  }

  //! Halves micro-batch m's slowest group while `can_shrink`.
  void shrink(std::size_t m) {
    while (can_shrink(m)) {
      group& g = plan_->microbatches[m].groups[slowest_of(m).at];
      g.cp /= 2;
      refresh(g);
      changed_[m] = true;
    }
  }

  //! Takes idle ranks of micro-batch m until none is left.
  void fill(std::size_t m) {
    auto& mbs = plan_->microbatches;
    for (std::int32_t idle = deficit(m); idle > 0; idle = deficit(m)) {
      move mv = best_move(m, idle);
      auto& groups = mbs[m].groups;
      switch (mv.kind) {
      case move::grow:
        if (mv.delta == std::numeric_limits<double>::infinity())
          throw error(status_code::infeasible,
                      fmt::format("micro-batch {}: {} of {} ranks would run no sample, and no "
                                  "group can grow, split or take a sample there (megatron "
                                  "topology: every rank runs a sample in every micro-batch)",
                                  m, idle, pr_->options.world_size));
        groups[mv.g].cp *= 2;
        refresh(groups[mv.g]);
        break;
      case move::split: {
        group& from = groups[mv.g];
        group added;
        added.cp = mv.size;
        for (const std::int32_t s : mv.moved) {
          from.samples.erase(std::find(from.samples.begin(), from.samples.end(), s));
          added.samples.push_back(s);
        }
        refresh(from);
        refresh(added);
        groups.push_back(std::move(added));
        break;
      }
      case move::full: {
        group all;
        all.cp = pr_->options.world_size;
        for (const group& g : groups)
          all.samples.insert(all.samples.end(), g.samples.begin(), g.samples.end());
        refresh(all);
        groups.assign(1, std::move(all));
        break;
      }
      case move::pull:
      case move::pull_group: {
        auto& donor = mbs[mv.donor_mb].groups;
        if (mv.kind == move::pull_group) {
          donor.erase(donor.begin() + static_cast<std::ptrdiff_t>(mv.donor_g));
        } else {
          group& from = donor[mv.donor_g];
          from.samples.erase(std::find(from.samples.begin(), from.samples.end(), mv.sample));
          refresh(from);
        }
        changed_[mv.donor_mb] = true;
        group added;
        added.cp = mv.size;
        added.samples.push_back(mv.sample);
        refresh(added);
        mbs[m].groups.push_back(std::move(added));
        break;
      }
      }
      changed_[m] = true;
    }
  }

  //! Places micro-batch m's groups from rank 0 on, largest first (then in their order): sizes
  //! that are powers of two, each at most the one before, land at multiples of themselves, and
  //! the group of all ranks is alone.
  void lay_out(std::size_t m) const {
    auto& groups = plan_->microbatches[m].groups;
    std::stable_sort(groups.begin(), groups.end(), [](const group& a, const group& b) {
      return a.cp != b.cp ? a.cp > b.cp : a.first_rank < b.first_rank;
    });
    std::int32_t next = 0;
    for (group& g : groups) {
      g.first_rank = next;
      next += g.cp;
    }
  }

  plan* plan_;
  const problem* pr_;
  const Estimator* estimator_;
  std::vector<std::int32_t> splittable_sizes_;
  bool full_legal_ = false;
  std::vector<bool> changed_;
};

} // namespace detail

//! Makes every rank of every micro-batch of `p` (a valid plan of `pr`, megatron topology) run a
//! sample, keeping the micro-batch count (a multiple of `microbatch_multiple`): idle ranks are
//! taken, one move at a time and the move that adds least to the step time under `estimator`
//! first, by doubling a group onto them, by splitting a group's samples onto a new group there,
//! by putting the micro-batch's samples on the group of all ranks, or by taking a sample from
//! another micro-batch's group of two or more (an empty micro-batch may take a whole group from
//! a micro-batch of several). Micro-batches it changes are laid out largest group first from
//! rank 0. Throws dcpp::error (infeasible) when the batch holds fewer samples than the plan has
//! micro-batches, or when no move is left for some idle rank.
template <workload_estimator Estimator>
void occupy_every_rank(plan& p, const problem& pr, const Estimator& estimator) {
  detail::occupier<Estimator>(p, pr, estimator).run();
}

} // namespace dcpp
