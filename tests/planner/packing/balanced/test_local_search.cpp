// Tests for balanced/local_search.hpp: it never raises the step time and keeps every invariant,
// from every construction's assignments on random batches; it makes the moves a small case
// needs and none where nothing can be gained.
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
double improve_checked(state& a, const batch& b, std::int32_t candidates) {
  const double before = a.step_time();
  d::improve(a, dcpp::balanced_tuning{}, candidates);
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

namespace {
//! What the headroom index reads of an assignment: each group's round and load, each round's
//! maximum (here the largest load filed in it, as in an assignment).
struct fake_groups {
  struct group {
    double load = 0;
  };
  std::vector<std::int32_t> round;
  std::vector<group> groups;
  std::vector<double> max;
  [[nodiscard]] std::int32_t round_of(std::int32_t id) const {
    return round[static_cast<std::size_t>(id)];
  }
  [[nodiscard]] const group& group_at(std::int32_t id) const {
    return groups[static_cast<std::size_t>(id)];
  }
  [[nodiscard]] double max_load(std::int32_t r) const { return max[static_cast<std::size_t>(r)]; }
};
} // namespace

TEST_CASE("local search: the round index walks by (minus the headroom, id), runs of equal "
          "headroom included") {
  // Loads near 1 and far below it: 1 - 1e-17 rounds to 1, so distinct loads of one round share a
  // headroom there and the walk must order them by id, as the pairs compare; equal loads, loads
  // at the round's maximum and rounds without groups besides. After every change each size is
  // walked whole against the pairs sorted here, and in part (a walk that stops early, then one
  // to the end: the merge kept between them must be the same order).
  const double loads[] = {0.0, 1e-17, 2e-17, 3e-17, 0.25, 0.5, 1.0, 1.0 + 0x1p-52, 0.75, 2.0};
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    dcpp::workload::rng r(seed);
    const std::size_t ids = 37, rounds = 5, sizes = 3;
    fake_groups g;
    g.groups.resize(ids);
    g.max.assign(rounds, 0.0);
    for (std::size_t id = 0; id < ids; ++id)
      g.round.push_back(static_cast<std::int32_t>(r.uniform_int(0, rounds - 2))); // one empty
    std::vector<std::optional<std::size_t>> size_of(ids);
    d::round_headroom_index<fake_groups> index(g);
    index.reset(sizes);
    const auto set_max = [&] {
      std::fill(g.max.begin(), g.max.end(), 0.0);
      for (std::size_t id = 0; id < ids; ++id)
        if (size_of[id]) {
          double& m = g.max[static_cast<std::size_t>(g.round[id])];
          m = std::max(m, g.groups[id].load);
        }
    };
    std::int64_t runs = 0; // adjacent entries of one round with one headroom and two loads
    for (int step = 0; step < 400; ++step) {
      const auto id = static_cast<std::int32_t>(r.uniform_int(0, ids - 1));
      const auto u = static_cast<std::size_t>(id);
      if (r.uniform() < 0.2) {
        index.drop(id);
        size_of[u].reset();
      } else {
        g.groups[u].load =
            r.uniform() < 0.7 ? loads[r.uniform_int(0, std::size(loads) - 1)] : r.uniform() * 2;
        size_of[u] = static_cast<std::size_t>(r.uniform_int(0, sizes - 1));
        index.file(*size_of[u], id);
      }
      set_max();
      for (std::size_t size = 0; size < sizes; ++size) {
        std::vector<std::pair<double, std::int32_t>> expected;
        for (std::size_t k = 0; k < ids; ++k)
          if (size_of[k] == size)
            expected.emplace_back(-(g.max[static_cast<std::size_t>(g.round[k])] - g.groups[k].load),
                                  static_cast<std::int32_t>(k));
        std::sort(expected.begin(), expected.end());
        for (std::size_t k = 1; k < expected.size(); ++k) {
          const auto a = static_cast<std::size_t>(expected[k - 1].second);
          const auto b = static_cast<std::size_t>(expected[k].second);
          runs += expected[k - 1].first == expected[k].first && g.round[a] == g.round[b] &&
                  g.groups[a].load != g.groups[b].load;
        }
        const std::size_t stop = expected.size() / 2;
        std::vector<std::pair<double, std::int32_t>> part, whole;
        index.walk(size, [&](const auto& e) {
          part.push_back(e);
          return part.size() > stop;
        });
        index.walk(size, [&](const auto& e) {
          whole.push_back(e);
          return false;
        });
        CHECK(whole == expected);
        CHECK(part.size() == std::min(stop + 1, expected.size()));
        CHECK(std::equal(part.begin(), part.end(), expected.begin()));
      }
    }
    CHECK(runs > 0); // the rounding runs were met
  }
}
