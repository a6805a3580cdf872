// The bisected construction's rounds: the samples that need CP (a smallest legal size of 2 or
// more) dealt to rounds, each round's ranks halved between its samples recursively, and samples
// moved and swapped between rounds while the rounds' times sum lower.
//
// Where a few long samples dominate a batch (context_ext: 41 samples of 300K-1M tokens among
// 2,048 on 256 ranks), the constructions that place sample by sample leave their rounds uneven:
// a round of one 1M-token sample on 64 ranks and three of 790-870K holds its shorter samples'
// groups idle for 2-4 s each, and only short samples, at a poor share of their area, can fill
// them. A round's time is its slowest group's; with the samples of a round on one group of all
// ranks it would be their total area over the world, were it not that a sample's area grows on
// groups larger than it needs. Halving the ranks between two parts of the round's samples that
// balance, and each half again while that makes it faster, gets close to that at the sizes where
// the area does not grow yet.
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
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/gap_bound.hpp"
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

//! What `bisected_rounds` deals to and how far it searches.
struct bisected_search {
  double fill = 0.97;         //!< a round's tokens at most this share of the world's
  std::int32_t steps = 64;    //!< moves or swaps taken, per deal
  std::int64_t trials = 4096; //!< moves and swaps weighed, per deal
  //! No step once the halving remembers this many layouts, or has weighed this many splits.
  std::size_t layouts = 40000;
  std::int64_t work = std::numeric_limits<std::int64_t>::max();
};

//! How `deal_members` deals: each member (costliest first) to the round of least area so far,
//! in a serpentine over the rounds, or to the round of fewest tokens so far.
enum class bisected_deal { least_area, serpentine, fewest_tokens };

//! The halving's members dealt to `k` rounds by `rule`, in `order`, each to the next round whose
//! tokens stay within `room` where its own would not; nullopt when one fits nowhere or a round
//! stays empty (fewer rounds hold them).
template <workload_estimator Estimator>
std::optional<std::vector<typename bisector<Estimator>::set>>
deal_members(const problem& pr, std::size_t k, double room, std::span<const std::size_t> order,
             bisected_deal rule, const bisector<Estimator>& halving) {
  using set = typename bisector<Estimator>::set;
  const std::span<const std::int32_t> members = halving.members();
  std::vector<set> dealt(k, 0);
  std::vector<double> area(k, 0.0), tokens(k, 0.0);
  for (std::size_t n = 0; n < order.size(); ++n) {
    const std::size_t i = order[n];
    const auto length = static_cast<double>(pr.lengths[static_cast<std::size_t>(members[i])]);
    std::size_t to = k;
    if (rule == bisected_deal::serpentine) {
      const std::size_t lap = n / k, at = n % k;
      const std::size_t start = lap % 2 == 0 ? at : k - 1 - at;
      for (std::size_t step = 0; step < k && to == k; ++step)
        if (const std::size_t m = (start + step) % k; tokens[m] + length <= room)
          to = m;
    } else {
      const std::vector<double>& by = rule == bisected_deal::least_area ? area : tokens;
      for (std::size_t m = 0; m < k; ++m)
        if (tokens[m] + length <= room && (to == k || by[m] < by[to]))
          to = m;
    }
    if (to == k)
      return std::nullopt;
    dealt[to] |= set{1} << i;
    area[to] += halving.least_area(i);
    tokens[to] += length;
  }
  if (std::find(dealt.begin(), dealt.end(), set{0}) != dealt.end())
    return std::nullopt;
  return dealt;
}

//! Improves dealt rounds (`time`: each round's time on the whole world): the move or swap of one
//! member between two rounds that lowers the two rounds' times most, while one does, within
//! `search`'s limits; no round empties.
template <workload_estimator Estimator>
void improve_rounds(std::vector<typename bisector<Estimator>::set>& dealt,
                    std::vector<double>& time, std::int32_t world, const bisected_search& search,
                    const bisector<Estimator>& halving) {
  using set = typename bisector<Estimator>::set;
  const std::size_t k = dealt.size();
  const auto time_of = [&](set s) { return halving.best(s, 0, world).time; };
  std::int64_t left = search.trials;
  for (std::int32_t step = 0;
       step < search.steps && left > 0 && halving.layouts() < search.layouts &&
       halving.splits_weighed() < search.work;
       ++step) {
    double gain = 0;
    std::size_t best_a = k, best_b = k;
    set best_from = 0, best_to = 0;
    for (std::size_t a = 0; a < k && left > 0; ++a)
      for (std::size_t b = 0; b < k && left > 0; ++b) {
        if (a == b)
          continue;
        const double now = time[a] + time[b];
        for (set xs = dealt[a]; xs != 0; xs &= xs - 1) {
          const set x = xs & (~xs + 1);
          // ys == 0: x moves to b (not from a round of one); else x and y swap (once a pair)
          for (set ys = b < a ? 0 : dealt[b];; ys &= ys - 1) {
            const set y = ys & (~ys + 1);
            if (y != 0 || dealt[a] != x) {
              --left;
              const set from = (dealt[a] & ~x) | y, to = (dealt[b] & ~y) | x;
              const double ta = time_of(from);
              if (ta < now - gain) {
                const double tb = time_of(to);
                if (now - (ta + tb) > gain && ta + tb < now * (1 - 1e-12)) {
                  gain = now - (ta + tb);
                  best_a = a;
                  best_b = b;
                  best_from = from;
                  best_to = to;
                }
              }
            }
            if (ys == 0)
              break;
          }
        }
      }
    if (best_a == k)
      break;
    dealt[best_a] = best_from;
    dealt[best_b] = best_to;
    time[best_a] = time_of(best_from);
    time[best_b] = time_of(best_to);
  }
}

//! The bisected construction's deal of the halving's members to `rounds` rounds, or nullopt when
//! they do not fit: three deals (`deal_members`, costliest first by least rank area, each
//! round's tokens within `search.fill` of the world's), each improved (`improve_rounds`); the
//! deal whose rounds' times on the whole world sum least is kept.
template <workload_estimator Estimator>
std::optional<std::vector<typename bisector<Estimator>::set>>
deal_rounds(const problem& pr, std::int32_t rounds, const bisected_search& search,
            const bisector<Estimator>& halving) {
  using set = typename bisector<Estimator>::set;
  const std::span<const std::int32_t> members = halving.members();
  const auto k = static_cast<std::size_t>(rounds);
  if (rounds < 1 || members.size() < k)
    return std::nullopt;
  const std::int32_t world = pr.options.world_size;
  const double room = search.fill * static_cast<double>(pr.options.max_tokens_per_rank) * world;
  // the order of dealing: least rank area, costliest first, then by index
  std::vector<std::size_t> order(members.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return halving.least_area(a) > halving.least_area(b);
  });
  std::optional<std::vector<set>> kept;
  double kept_total = std::numeric_limits<double>::infinity();
  for (const bisected_deal rule :
       {bisected_deal::least_area, bisected_deal::serpentine, bisected_deal::fewest_tokens}) {
    std::optional<std::vector<set>> dealt = deal_members(pr, k, room, order, rule, halving);
    if (!dealt)
      continue;
    std::vector<double> time(k);
    for (std::size_t m = 0; m < k; ++m)
      time[m] = halving.best((*dealt)[m], 0, world).time;
    improve_rounds(*dealt, time, world, search, halving);
    double total = 0;
    for (const double t : time)
      total += t;
    if (total < kept_total) {
      kept_total = total;
      kept = std::move(dealt);
    }
  }
  return kept;
}

//! Each round's members laid out on the ranks [0, blocks[m]) (`bisector::best`), as plan rounds.
template <workload_estimator Estimator>
std::vector<plan_microbatch> lay_out(std::span<const typename bisector<Estimator>::set> dealt,
                                     std::span<const std::int32_t> blocks,
                                     const bisector<Estimator>& halving) {
  DCPP_EXPECTS(dealt.size() == blocks.size());
  std::vector<plan_microbatch> out(dealt.size());
  for (std::size_t m = 0; m < dealt.size(); ++m)
    out[m].groups = halving.best(dealt[m], 0, blocks[m]).groups;
  return out;
}

//! The bisected construction's `rounds` rounds of the halving's members (samples that need CP),
//! or nullopt when they do not fit: `deal_rounds`' rounds, each on the whole world.
template <workload_estimator Estimator>
std::optional<std::vector<plan_microbatch>> bisected_rounds(const problem& pr, std::int32_t rounds,
                                                            const bisected_search& search,
                                                            const bisector<Estimator>& halving) {
  const auto dealt = deal_rounds(pr, rounds, search, halving);
  if (!dealt)
    return std::nullopt;
  const std::vector<std::int32_t> world(dealt->size(), pr.options.world_size);
  return lay_out<Estimator>(*dealt, world, halving);
}

//! What `reserved_blocks` lowers: the rounds' times (`time`, each round's members on the ranks
//! [0, blocks[m])) plus the other samples' least area (`others_area`) beyond what the free ranks
//! hold for their rounds' times, over the world.
inline double reserve_objective(std::span<const double> time, std::span<const std::int32_t> blocks,
                                double others_area, std::int32_t world) {
  double sum = 0, free = 0;
  for (std::size_t m = 0; m < time.size(); ++m) {
    sum += time[m];
    free += static_cast<double>(world - blocks[m]) * time[m];
  }
  return sum + std::max(0.0, others_area - free) / world;
}

//! How many ranks of the world each dealt round's members take, from rank 0 on, where the rest
//! is left free for the batch's other samples, whose least rank areas sum to `others_area`: a
//! free rank holds them for its round's time, and what the free ranks cannot hold takes rounds
//! of its own, at best its area over the world. So the blocks are chosen to lower
//!   sum of the rounds' times + max(0, others_area - free ranks x their rounds' times) / world,
//! one round's block at a time (of eighths of the world, where those are whole ranks; the
//! whole world first), while a change lowers it. A round whose members need all the world keeps
//! it; without other samples every block is the world. (A block's layout halves it as
//! `bisector::best` does: 48 of 64 ranks as 32 + 16.) With the blocks, each round's time on its
//! block and the objective they reach.
struct reserved_layout {
  std::vector<std::int32_t> blocks;
  std::vector<double> times; // each round's time on its block
  double objective = 0;
};
template <workload_estimator Estimator>
reserved_layout reserved_blocks(std::span<const typename bisector<Estimator>::set> dealt,
                                double others_area, std::int32_t world,
                                const bisector<Estimator>& halving) {
  const std::size_t k = dealt.size();
  std::vector<std::int32_t> blocks(k, world);
  std::vector<double> time(k);
  for (std::size_t m = 0; m < k; ++m)
    time[m] = halving.best(dealt[m], 0, world).time;
  const auto total = [&](const std::vector<double>& t) {
    return reserve_objective(t, blocks, others_area, world);
  };
  double now = total(time);
  if (!(others_area > 0))
    return {std::move(blocks), std::move(time), now};
  std::vector<std::int32_t> choices;
  for (std::int32_t j = 1; j < 8; ++j)
    if (std::int64_t{world} * j % 8 == 0)
      choices.push_back(static_cast<std::int32_t>(std::int64_t{world} * j / 8));
  // each pass takes every change that lowers it; a pass without one ends the search (at most
  // one pass per round and choice: each change lowers a finite sum)
  for (std::size_t pass = 0; pass < k * (choices.size() + 1); ++pass) {
    bool changed = false;
    for (std::size_t m = 0; m < k; ++m)
      for (const std::int32_t b : choices) {
        if (b == blocks[m])
          continue;
        const double t = halving.best(dealt[m], 0, b).time;
        if (!(t < std::numeric_limits<double>::infinity()))
          continue;
        const std::int32_t was_block = blocks[m];
        const double was_time = time[m];
        blocks[m] = b;
        time[m] = t;
        if (const double v = total(time); v < now * (1 - 1e-12)) {
          now = v;
          changed = true;
        } else {
          blocks[m] = was_block;
          time[m] = was_time;
        }
      }
    if (!changed)
      break;
  }
  return {std::move(blocks), std::move(time), now};
}

//! Deals the samples `others` (each of smallest legal size 1), costliest at one rank first (then
//! by id), each as a group of one rank to the free rank of `rounds` (a rank none of its round's
//! groups holds) with the most time left before its round's slowest group (`times[m]`, round
//! m's: its layout's `bisector::split::time`), where its cost fits that time and its tokens the
//! rank's budget. Returns the samples that fit no free rank, in batch order.
template <workload_estimator Estimator>
std::vector<std::int32_t>
fill_free_ranks(const problem& pr, const Estimator& estimator, std::vector<plan_microbatch>& rounds,
                std::span<const double> times, std::span<const std::int32_t> others) {
  DCPP_EXPECTS(times.size() == rounds.size());
  const plan_options& o = pr.options;
  struct slot {
    std::size_t round = 0;
    std::int32_t rank = 0;
    double room = 0; // its round's time less its load
    std::int64_t tokens = 0;
    std::vector<std::int32_t> samples;
  };
  std::vector<slot> slots;
  for (std::size_t m = 0; m < rounds.size(); ++m) {
    std::vector<char> held(static_cast<std::size_t>(o.world_size), 0);
    for (const plan_group& g : rounds[m].groups)
      std::fill_n(held.begin() + g.first_rank, g.cp, char{1});
    for (std::int32_t r = 0; r < o.world_size; ++r)
      if (held[static_cast<std::size_t>(r)] == 0 && is_legal_group(o, r, 1))
        slots.push_back({m, r, times[m], 0, {}});
  }
  std::vector<std::pair<double, std::int32_t>> order; // (cost on one rank, sample)
  order.reserve(others.size());
  for (const std::int32_t s : others) {
    DCPP_EXPECTS(pr.min_cp_of[static_cast<std::size_t>(s)] == 1);
    order.emplace_back(sample_cost(pr, estimator, static_cast<std::size_t>(s), 1), s);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  // the slots by most room (then first in round and rank order): a heap of their indices
  const auto less_room = [&](std::size_t a, std::size_t b) {
    return slots[a].room < slots[b].room || (slots[a].room == slots[b].room && a > b);
  };
  std::vector<std::size_t> heap(slots.size());
  for (std::size_t i = 0; i < heap.size(); ++i)
    heap[i] = i;
  std::make_heap(heap.begin(), heap.end(), less_room);
  std::vector<std::int32_t> left;
  for (const auto& [cost, s] : order) {
    const std::int64_t tokens = pr.rank_tokens(static_cast<std::size_t>(s), 1);
    // the roomiest slot whose tokens take it (popped until one does; the others put back)
    std::vector<std::size_t> passed;
    std::size_t to = slots.size();
    while (!heap.empty()) {
      const std::size_t top = heap.front();
      if (!(cost <= slots[top].room))
        break; // no slot has the time
      std::pop_heap(heap.begin(), heap.end(), less_room);
      heap.pop_back();
      if (slots[top].tokens + tokens <= o.max_tokens_per_rank) {
        to = top;
        break;
      }
      passed.push_back(top);
    }
    if (to < slots.size()) {
      slots[to].room -= cost;
      slots[to].tokens += tokens;
      slots[to].samples.push_back(s);
      passed.push_back(to);
    } else {
      left.push_back(s);
    }
    for (const std::size_t i : passed) {
      heap.push_back(i);
      std::push_heap(heap.begin(), heap.end(), less_room);
    }
  }
  for (slot& sl : slots)
    if (!sl.samples.empty())
      rounds[sl.round].groups.push_back({sl.rank, 1, std::move(sl.samples), 0, 0.0});
  std::sort(left.begin(), left.end());
  return left;
}

} // namespace dcpp::detail
