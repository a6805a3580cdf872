// The bisected construction's layout of one round: a set of samples on a block of ranks, the
// block halved between two parts of the set recursively while that makes the round faster.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dcpp/error.hpp"
#include "dcpp/planner/bounds/gap.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp::detail {

//! Lays out sets of up to 64 samples (`members`, named by their index there in a bit mask) on
//! blocks of ranks: the fastest way found to halve a block between them.
template <workload_estimator Estimator>
class bisector {
public:
  using set = std::uint64_t; //!< bit i: members[i]
  static constexpr std::size_t most_members = 64;

  struct split {
    double time = std::numeric_limits<double>::infinity(); //!< the slowest group's load
    std::vector<plan_group> groups;                        //!< samples by their batch ids
  };

  //! `exhaustive`: the most members whose splits are all tried (at most 20); `splits`: how many
  //! of the most even splits that place both halves are halved further.
  bisector(const problem& pr, const Estimator& estimator, std::span<const std::int32_t> members,
           std::int32_t exhaustive, std::int32_t splits)
      : pr_(&pr), estimator_(&estimator), members_(members.begin(), members.end()),
        exhaustive_(std::min(exhaustive, 20)), splits_(splits) {
    DCPP_EXPECTS(members_.size() <= most_members);
    least_.reserve(members_.size());
    for (const std::int32_t s : members_)
      least_.push_back(least_of_sample(pr, estimator, static_cast<std::size_t>(s)).area);
  }

  [[nodiscard]] std::span<const std::int32_t> members() const noexcept { return members_; }
  //! How many layouts (a set of members on a block) it has worked out and remembers.
  [[nodiscard]] std::size_t layouts() const noexcept { return known_.size(); }
  //! How many splits of a set between two blocks it has weighed (its work: a few nanoseconds
  //! each, where a layout may weigh thousands).
  [[nodiscard]] std::int64_t splits_weighed() const noexcept { return weighed_; }
  //! members[i]'s least rank area over its legal sizes.
  [[nodiscard]] double least_area(std::size_t i) const { return least_[i]; }

  //! The members in `s` on the `ranks` ranks from `first`: on one group, or halved (the first
  //! half its larger one) with each half's members split the same way, whichever is faster.
  //! Infinite time when no way holds them (a member needs more ranks, or the tokens do not
  //! fit). Results are remembered: the rounds' search asks for the same sets again and again.
  [[nodiscard]] const split& best(set s, std::int32_t first, std::int32_t ranks) const {
    const key k{s, first, ranks};
    if (const auto it = known_.find(k); it != known_.end())
      return it->second;
    split out = halve(s, first, ranks);
    return known_.emplace(k, std::move(out)).first->second;
  }

  //! The same for members named by their batch ids (each must be one of `members`).
  [[nodiscard]] const split& best(std::span<const std::int32_t> ids, std::int32_t first,
                                  std::int32_t ranks) const {
    set s = 0;
    for (const std::int32_t id : ids) {
      const auto at = std::find(members_.begin(), members_.end(), id);
      DCPP_EXPECTS(at != members_.end());
      s |= set{1} << static_cast<unsigned>(at - members_.begin());
    }
    return best(s, first, ranks);
  }

private:
  struct key {
    set members = 0;
    std::int32_t first = 0;
    std::int32_t ranks = 0;
    friend bool operator==(const key&, const key&) = default;
  };
  struct key_hash {
    std::size_t operator()(const key& k) const noexcept {
      std::uint64_t h = k.members * 0x9e3779b97f4a7c15ULL;
      h ^= (static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.first)) << 32 |
            static_cast<std::uint32_t>(k.ranks)) +
           0x7f4a7c159e3779b9ULL + (h << 6) + (h >> 2);
      return static_cast<std::size_t>(h ^ (h >> 29));
    }
  };

  [[nodiscard]] split halve(set s, std::int32_t first, std::int32_t ranks) const {
    split out;
    if (s == 0) {
      out.time = 0;
      return out;
    }
    // one group where the block is a legal group (only then is the estimator asked for its
    // size: a cost table, such as a Python cost's, holds the legal sizes alone)
    if (is_legal_group(pr_->options, first, ranks)) {
      if (const std::optional<double> t = one_group(s, ranks)) {
        out.time = *t;
        plan_group& g = out.groups.emplace_back();
        g.first_rank = first;
        g.cp = ranks;
        for (set rest = s; rest != 0; rest &= rest - 1)
          g.samples.push_back(members_[static_cast<std::size_t>(std::countr_zero(rest))]);
      }
    }
    const std::optional<std::pair<std::int32_t, std::int32_t>> h = halves(ranks);
    if (!h)
      return out;
    // no way to place them beats their least area spread over the ranks
    double area = 0;
    for (set rest = s; rest != 0; rest &= rest - 1)
      area += least_[static_cast<std::size_t>(std::countr_zero(rest))];
    if (!(area / ranks < out.time))
      return out;
    const auto [lo, hi] = *h;
    // the most even splits first, until `splits_` of them placed both halves (sorted a few at
    // a time: the first few usually do)
    std::vector<std::pair<double, set>> splits = even_splits(s, lo, hi, out.time);
    std::int32_t placed = 0;
    std::size_t sorted = 0;
    for (std::size_t i = 0; i < splits.size() && placed < splits_; ++i) {
      if (i == sorted) {
        const std::size_t more =
            std::min(splits.size() - sorted, 4 * static_cast<std::size_t>(splits_));
        std::partial_sort(splits.begin() + static_cast<std::ptrdiff_t>(sorted),
                          splits.begin() + static_cast<std::ptrdiff_t>(sorted + more),
                          splits.end());
        sorted += more;
      }
      const set on_hi = splits[i].second;
      const split& sa = best(s & ~on_hi, first, lo);
      if (!(sa.time < std::numeric_limits<double>::infinity()))
        continue;
      const split& sb = best(on_hi, first + lo, hi);
      if (!(sb.time < std::numeric_limits<double>::infinity()))
        continue;
      ++placed;
      if (const double t = std::max(sa.time, sb.time); t < out.time) {
        out.time = t;
        out.groups = sa.groups;
        out.groups.insert(out.groups.end(), sb.groups.begin(), sb.groups.end());
      }
    }
    return out;
  }

  //! The load of one group of `ranks` holding the members in `s`, if it holds them.
  [[nodiscard]] std::optional<double> one_group(set s, std::int32_t ranks) const {
    std::int64_t tokens = 0;
    double load = 0;
    for (set rest = s; rest != 0; rest &= rest - 1) {
      const auto us =
          static_cast<std::size_t>(members_[static_cast<std::size_t>(std::countr_zero(rest))]);
      if (pr_->min_cp_of[us] > ranks)
        return std::nullopt;
      tokens += pr_->rank_tokens(us, ranks);
      load += sample_cost(*pr_, *estimator_, us, ranks);
    }
    if (tokens > pr_->options.max_tokens_per_rank)
      return std::nullopt;
    return load;
  }

  //! Sample `us`'s load on a block of `ranks` as one group, which it fits (`min_cp_of` at most
  //! `ranks`): its cost there where that is a legal size, else (a block of the aligned topology
  //! that is no power of two, or one above `max_cp`) its cost on the largest legal size below,
  //! spread over the block. The estimator is asked for legal sizes alone: a cost table, such as
  //! a Python cost's, holds no other (the planner asked a Python cost for 6 ranks of 16).
  [[nodiscard]] double block_load(std::size_t us, std::int32_t ranks) const {
    const std::vector<std::int32_t>& sizes = pr_->cp_sizes;
    const auto above = std::upper_bound(sizes.begin(), sizes.end(), ranks);
    DCPP_EXPECTS(above != sizes.begin());
    const std::int32_t legal = *(above - 1);
    const double cost = sample_cost(*pr_, *estimator_, us, legal);
    return legal == ranks ? cost : cost * legal / ranks;
  }

  //! The two blocks `ranks` halves into, larger first: equal halves where that is legal
  //! (aligned: powers of two), else the largest power of two below and the rest (48 ranks:
  //! 32 + 16), for contiguous groups the larger and the smaller half. None below 2 ranks or
  //! below the smallest legal size.
  [[nodiscard]] std::optional<std::pair<std::int32_t, std::int32_t>>
  halves(std::int32_t ranks) const {
    if (ranks < 2)
      return std::nullopt;
    std::int32_t lo = ranks - ranks / 2;
    if (aligned_offsets(pr_->options.group_topology)) {
      lo = static_cast<std::int32_t>(std::bit_floor(static_cast<std::uint32_t>(ranks)));
      if (lo == ranks)
        lo /= 2;
    }
    const std::int32_t hi = ranks - lo;
    if (lo < pr_->options.min_cp || hi < pr_->options.min_cp)
      return std::nullopt;
    return std::pair{lo, hi};
  }

  //! Splits of the members in `s` between a block of `lo` and one of `hi` ranks, each with its
  //! evenness (the larger side's load on one group per block; the set is the second block's),
  //! each side's tokens within a rank's budget and each side's least area over its ranks below
  //! `limit` (no split faster than that could come of it): every split up to `exhaustive_`
  //! members (with equal blocks, the last member on the first), past it one greedy split (the
  //! costliest member first, to the side it loads least). Unsorted.
  [[nodiscard]] std::vector<std::pair<double, set>>
  even_splits(set s, std::int32_t lo, std::int32_t hi, double limit) const {
    std::vector<std::size_t> at; // member indices in `s`, ascending
    for (set rest = s; rest != 0; rest &= rest - 1)
      at.push_back(static_cast<std::size_t>(std::countr_zero(rest)));
    const std::size_t n = at.size();
    const std::int64_t budget = pr_->options.max_tokens_per_rank;
    const auto inf = std::numeric_limits<double>::infinity();
    const std::int64_t none = std::numeric_limits<std::int64_t>::max() / 128;
    std::vector<double> cost_lo(n), cost_hi(n), area(n);
    std::vector<std::int64_t> tokens_lo(n), tokens_hi(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto us = static_cast<std::size_t>(members_[at[i]]);
      const bool on_lo = pr_->min_cp_of[us] <= lo, on_hi = pr_->min_cp_of[us] <= hi;
      if (!on_lo && !on_hi)
        return {}; // no split holds it
      cost_lo[i] = on_lo ? block_load(us, lo) : inf;
      cost_hi[i] = on_hi ? block_load(us, hi) : inf;
      tokens_lo[i] = on_lo ? pr_->rank_tokens(us, lo) : none;
      tokens_hi[i] = on_hi ? pr_->rank_tokens(us, hi) : none;
      area[i] = least_[at[i]];
    }
    std::vector<std::pair<double, set>> found;
    if (n <= static_cast<std::size_t>(exhaustive_)) {
      // Every split in Gray-code order, one member changing side per step (each sum kept
      // exactly: the loads are added again per split where a member may be infinite on a side).
      // One member alone on a block with the other block empty is a split too (the member on
      // fewer ranks); with equal blocks the last member stays on the first (the mirror images).
      const std::size_t free_members = lo == hi ? n - 1 : n;
      const std::uint32_t masks = 1u << free_members;
      found.reserve(std::min<std::uint32_t>(masks, 1u << 12));
      std::int64_t on_lo = 0, on_hi = 0;
      double area_lo = 0, area_hi = 0;
      for (std::size_t i = 0; i < n; ++i) {
        on_lo += tokens_lo[i];
        area_lo += area[i];
      }
      weighed_ += masks;
      std::uint32_t gray = 0;
      for (std::uint32_t step = 0; step < masks; ++step) {
        if (step > 0) {
          const auto flip = static_cast<std::size_t>(std::countr_zero(step));
          gray ^= 1u << flip;
          if ((gray >> flip) & 1u) { // to the second block
            on_lo -= tokens_lo[flip];
            on_hi += tokens_hi[flip];
            area_lo -= area[flip];
            area_hi += area[flip];
          } else {
            on_hi -= tokens_hi[flip];
            on_lo += tokens_lo[flip];
            area_hi -= area[flip];
            area_lo += area[flip];
          }
        }
        if (on_lo > budget || on_hi > budget ||
            !(std::max(area_lo / lo, area_hi / hi) < limit * (1 + 1e-9)))
          continue;
        double load_lo = 0, load_hi = 0;
        set on_second = 0;
        for (std::size_t i = 0; i < n; ++i)
          if ((gray >> i) & 1u) {
            load_hi += cost_hi[i];
            on_second |= set{1} << at[i];
          } else {
            load_lo += cost_lo[i];
          }
        found.emplace_back(std::max(load_lo, load_hi), on_second);
      }
    } else {
      std::vector<std::size_t> order(n);
      for (std::size_t i = 0; i < n; ++i)
        order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return std::min(cost_lo[a], cost_hi[a]) > std::min(cost_lo[b], cost_hi[b]);
      });
      ++weighed_;
      double load_lo = 0, load_hi = 0;
      std::int64_t on_lo = 0, on_hi = 0;
      set on_second = 0;
      for (const std::size_t i : order) {
        const bool fits_lo = on_lo + tokens_lo[i] <= budget;
        const bool fits_hi = on_hi + tokens_hi[i] <= budget;
        if (fits_lo && (!fits_hi || load_lo + cost_lo[i] <= load_hi + cost_hi[i])) {
          load_lo += cost_lo[i];
          on_lo += tokens_lo[i];
        } else if (fits_hi) {
          load_hi += cost_hi[i];
          on_hi += tokens_hi[i];
          on_second |= set{1} << at[i];
        } else {
          return {};
        }
      }
      found.emplace_back(std::max(load_lo, load_hi), on_second);
    }
    return found;
  }

  const problem* pr_;
  const Estimator* estimator_;
  std::vector<std::int32_t> members_;
  std::vector<double> least_;
  std::int32_t exhaustive_;
  std::int32_t splits_;
  mutable std::unordered_map<key, split, key_hash> known_;
  mutable std::int64_t weighed_ = 0;
};

} // namespace dcpp::detail
