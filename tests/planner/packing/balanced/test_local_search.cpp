// Tests for balanced/local_search.hpp: it never raises the step time and keeps every invariant,
// from every construction's assignments on random batches; it makes the moves and swaps a small
// case needs (a swap with a group deep in the headroom order among them) and none where nothing
// can be gained; the heap and the round index lead it to the same plans.
#include "../../../support.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "dcpp/planner/packing/balanced/levelled.hpp"
#include "dcpp/planner/packing/balanced/local_search.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"
#include "dcpp/planner/packing/static_cp.hpp"
#include "dcpp/workload/generators.hpp"
#include "parts.hpp"

namespace {
using namespace dcpp_test::balanced_parts;
namespace d = dcpp::detail;

//! A one-group-per-entry plan: `groups[m]` lists round m's groups as (first rank, cp, samples).
dcpp::plan plan_of(const batch& b, const std::vector<std::vector<dcpp::plan_group>>& groups) {
  dcpp::plan p = d::make_plan_shell(b.pr, "test");
  for (const auto& round : groups) {
    p.microbatches.emplace_back();
    p.microbatches.back().groups = round;
  }
  return p;
}

//! Improves `a` and checks the search's promises; returns the step time before.
double improve_checked(state& a, const batch& b, std::int32_t candidates,
                       const dcpp::balanced_tuning& tuning = {}) {
  const double before = a.step_time();
  d::improve(a, tuning, candidates);
  check_state(a, b);
  CHECK(a.step_time() <= before);
  return before;
}
} // namespace

TEST_CASE("local search: never slower, every invariant kept, from every construction") {
  const dcpp::balanced_tuning tuning;
  int gained = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const batch b(c.options, c.lengths, tabulation_for(seed));
    std::vector<dcpp::plan> starts = {dcpp::megatron_greedy{}.pack(b.pr, b.e)};
    if (dcpp::static_cp{}.check(b.pr).ok())
      starts.push_back(dcpp::static_cp{}.pack(b.pr, b.e));
    for (const auto& p : starts)
      for (const std::int32_t candidates : {1, 8, 64}) {
        state a = state::from_plan(b.costs, p);
        const std::int32_t rounds_before = a.rounds();
        gained += improve_checked(a, b, candidates) > a.step_time() ? 1 : 0;
        CHECK(a.rounds() == rounds_before); // rounds are kept, groups move within them
        // deterministic: the same start gives the same result
        state again = state::from_plan(b.costs, p);
        d::improve(again, tuning, candidates);
        CHECK(again.to_plan("t").microbatches == a.to_plan("t").microbatches);
      }
    const d::sample_sizes sizes = d::least_area_sizes(b.costs, tuning);
    const d::levelled_start start = d::levelled_inputs(b.costs, sizes);
    state a = d::levelled(b.costs, start.slots, start, d::token_lower_bound(b.costs, sizes) + 1,
                          d::levelled_reach{}, tuning);
    improve_checked(a, b, 64);
  }
  CHECK(gained >= 10);
}

TEST_CASE("local search: the critical group gives a sample to free ranks") {
  // one round, 2 ranks: both samples on rank 0, rank 1 idle; one moves, the time halves
  const dcpp::plan_options o = options_for(2, 4096);
  const batch b(o, {1000, 1000}, tabulation::none);
  state a = state::from_plan(b.costs, plan_of(b, {{{0, 1, {0, 1}, 0, 0.0}}}));
  const double w = b.costs.cost(0, 1);
  CHECK(a.step_time() == doctest::Approx(2 * w + dcpp::microbatch_overhead(b.pr, b.e)));
  improve_checked(a, b, 8);
  CHECK(a.step_time() == doctest::Approx(w + dcpp::microbatch_overhead(b.pr, b.e)));
  CHECK(a.group_of(0) != a.group_of(1));
}

TEST_CASE("local search: a swap between rounds where no move fits") {
  // 2 ranks, two rounds, every group too full to take a sample: round 0 {L, L} beside {2,100
  // tokens}, round 1 {S, S} beside one 4,096-token sample that sets its time. Swapping an L for
  // an S lowers round 0 by L - S and leaves round 1's maximum where it is; no move is possible.
  const dcpp::plan_options o = options_for(2, 4096);
  const batch b(o, {2048, 2048, 2100, 2000, 2000, 4096}, tabulation::none);
  state a = state::from_plan(b.costs, plan_of(b, {{{0, 1, {0, 1}, 0, 0.0}, {1, 1, {2}, 0, 0.0}},
                                                  {{0, 1, {3, 4}, 0, 0.0}, {1, 1, {5}, 0, 0.0}}}));
  const double before = improve_checked(a, b, 8);
  // at least the swap's gain (the search may go on from there)
  CHECK(a.step_time() <= before - (b.costs.cost(0, 1) - b.costs.cost(3, 1)) * (1 - 1e-9));
}

TEST_CASE("local search: a swap with a group deep in the headroom order") {
  // 12 ranks, two rounds, no free rank and no group with room for a move. Round 0: {L, L} sets
  // the time beside eleven 2,100-token samples. Round 1: {L, L} too, then ten 2,500-token samples
  // (more headroom than any other group, nothing lighter than L to give back), first in the
  // headroom order, and {S, S}, the one partner for a swap (round 1's {L, L} has none: its
  // partner would be in its own round, and round 0 has nothing lighter to give).
  const dcpp::plan_options o = options_for(12, 4096);
  std::vector<std::int64_t> lengths = {2048, 2048};
  std::vector<dcpp::plan_group> round0 = {{0, 1, {0, 1}, 0, 0.0}};
  for (std::int32_t r = 1; r < 12; ++r) {
    round0.push_back({r, 1, {static_cast<std::int32_t>(lengths.size())}, 0, 0.0});
    lengths.push_back(2100);
  }
  const auto l2 = static_cast<std::int32_t>(lengths.size());
  std::vector<dcpp::plan_group> round1 = {{0, 1, {l2, l2 + 1}, 0, 0.0}};
  lengths.insert(lengths.end(), {2048, 2048});
  for (std::int32_t r = 1; r < 11; ++r) {
    round1.push_back({r, 1, {static_cast<std::int32_t>(lengths.size())}, 0, 0.0});
    lengths.push_back(2500);
  }
  const auto s = static_cast<std::int32_t>(lengths.size());
  round1.push_back({11, 1, {s, s + 1}, 0, 0.0});
  lengths.insert(lengths.end(), {2000, 2000});
  const batch b(o, lengths, tabulation::none);
  const dcpp::plan p = plan_of(b, {round0, round1});
  const double gain = b.costs.cost(0, 1) - b.costs.cost(s, 1);
  REQUIRE(gain > 0);

  // the walk at the search's 8 candidates alone ends among the ten before {S, S}: no change
  dcpp::balanced_tuning narrow;
  narrow.swap_groups = 1;
  state a = state::from_plan(b.costs, p);
  const double before = improve_checked(a, b, 8, narrow);
  CHECK(a.to_plan("test").microbatches == p.microbatches);

  // `swap_groups` (64 by default) reaches it: an L and an S change places
  state c = state::from_plan(b.costs, p);
  improve_checked(c, b, 8);
  CHECK(c.step_time() <= before - gain * (1 - 1e-9));
  CHECK((c.round_of(c.group_of(s)) == 0 || c.round_of(c.group_of(s + 1)) == 0));
}

TEST_CASE("local search: a level assignment is left as it is") {
  // equal samples, one per rank: no move can gain
  const dcpp::plan_options o = options_for(4, 4096);
  const batch b(o, {900, 900, 900, 900, 900, 900, 900, 900}, tabulation::none);
  const dcpp::plan p = plan_of(
      b, {{{0, 1, {0}, 0, 0.0}, {1, 1, {1}, 0, 0.0}, {2, 1, {2}, 0, 0.0}, {3, 1, {3}, 0, 0.0}},
          {{0, 1, {4}, 0, 0.0}, {1, 1, {5}, 0, 0.0}, {2, 1, {6}, 0, 0.0}, {3, 1, {7}, 0, 0.0}}});
  state a = state::from_plan(b.costs, p);
  improve_checked(a, b, 64);
  CHECK(a.to_plan("test").microbatches == p.microbatches);
}

TEST_CASE("local search: the heap and the set headroom index give the same plans") {
  // heap_index_groups = 0 files every group in heaps, a count past any batch in sets: the two
  // walk the same order, so every step must choose the same change
  dcpp::balanced_tuning heaps;
  heaps.heap_index_groups = 0;
  dcpp::balanced_tuning sets;
  sets.heap_index_groups = std::int64_t{1} << 40;
  int moved = 0;
  for (std::uint64_t seed = 41; seed <= 100; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const batch b(c.options, c.lengths, tabulation_for(seed));
    const dcpp::plan start = dcpp::megatron_greedy{}.pack(b.pr, b.e);
    for (const std::int32_t candidates : {1, 8, 64}) {
      CAPTURE(candidates);
      state by_heap = state::from_plan(b.costs, start);
      state by_set = state::from_plan(b.costs, start);
      d::improve(by_heap, heaps, candidates);
      d::improve(by_set, sets, candidates);
      check_state(by_heap, b);
      CHECK(by_heap.to_plan("t").microbatches == by_set.to_plan("t").microbatches);
      moved += by_set.to_plan("t").microbatches != start.microbatches ? 1 : 0;
    }
  }
  CHECK(moved >= 60); // most starts are changed by the search, so the walks were exercised
}
