// The bisected construction's rounds: the samples that need CP (a smallest legal size of 2 or
// more) dealt to rounds, each round's ranks halved between its samples recursively, and samples
// moved and swapped between rounds while the rounds' times sum lower.
//
// Where a few long samples dominate a batch (tens of samples of hundreds of thousands of tokens
// among thousands), the constructions that place sample by sample leave their rounds uneven: a
// round of the longest sample and a few slightly shorter ones holds the shorter samples' groups
// idle for seconds, and only short samples, at a poor share of their area, can fill them. A round's
// time is its slowest group's; with the samples of a round on one group of all ranks it would be
// their total area over the world, were it not that a sample's area grows on groups larger than it
// needs. Halving the ranks between two parts of the round's samples that balance, and each half
// again while that makes it faster, gets close to that at the sizes where the area does not grow
// yet.
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
#include "dcpp/planner/packing/balanced/bisector.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp::detail {

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
