// Tests for balanced/levelled.hpp: valid rounds on random batches, the same rounds with and
// without a cost table, and the early end of a round changing nothing.
#include "../../../support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "dcpp/planner/packing/balanced/levelled.hpp"
#include "parts.hpp"

namespace {
using namespace dcpp_test::balanced_parts;
namespace d = dcpp::detail;
namespace w = dcpp::workload;

//! The levelled construction at the least-area sizes, allowed `extra` rounds beyond the token
//! minimum.
state levelled_on(const batch& b, const d::levelled_reach& reach, std::int64_t extra = 0) {
  const dcpp::balanced_tuning tuning;
  const d::sample_sizes sizes = d::least_area_sizes(b.costs, tuning);
  const d::levelled_start start = d::levelled_inputs(b.costs, sizes);
  const std::int64_t allowed = d::token_lower_bound(b.costs, sizes) + extra;
  return d::levelled(b.costs, start.slots, start, allowed, reach, tuning);
}
} // namespace

TEST_CASE("levelled_inputs: samples by work per token, then length, then id") {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    for (const tabulation t : {tabulation::none, tabulation::rows_only, tabulation::table}) {
      const batch b(c.options, c.lengths, t);
      const d::sample_sizes sizes = d::least_area_sizes(b.costs, dcpp::balanced_tuning{});
      const d::levelled_start start = d::levelled_inputs(b.costs, sizes);
      REQUIRE(start.slots.size() == c.lengths.size());
      std::vector<int> seen(c.lengths.size(), 0);
      std::int64_t rank_tokens = 0;
      for (std::size_t k = 0; k < start.slots.size(); ++k) {
        const d::levelled_slot& x = start.slots[k];
        const auto u = static_cast<std::size_t>(x.id);
        ++seen[u];
        CHECK(x.cp == sizes.cp[u]);
        CHECK(x.cost == sizes.cost[u]);
        CHECK(x.tokens == b.costs.tokens(x.id, x.cp));
        CHECK(x.per_token == x.cost / static_cast<double>(x.tokens));
        CHECK(start.min_tokens <= x.tokens);
        rank_tokens += x.tokens * x.cp;
        if (k > 0) {
          const d::levelled_slot& y = start.slots[k - 1];
          const auto key = [](const d::levelled_slot& z) {
            return std::tuple(-z.per_token, -z.length, z.id);
          };
          CHECK(key(y) < key(x));
        }
      }
      CHECK(rank_tokens == start.rank_tokens);
      for (const int n : seen)
        CHECK(n == 1);
    }
  }
}

TEST_CASE("levelled: every sample once, legal groups, a multiple of rounds, any reach") {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const batch b(c.options, c.lengths, tabulation_for(seed));
    for (const d::levelled_reach reach :
         {d::levelled_reach{1.05, 0.0}, d::levelled_reach{1.0, 0.4}, d::levelled_reach{1.5, 0.0},
          d::levelled_reach{1.05, 0.0, true, 1.25}, d::levelled_reach{1.05, 0.0, true, 0, true}}) {
      const state a = levelled_on(b, reach, static_cast<std::int64_t>(seed % 3));
      check_state(a, b);
      CHECK(a.rounds() % c.options.microbatch_multiple == 0);
    }
  }
}

TEST_CASE("levelled: a free ride fills a wide group's slack and slows no round") {
  // 16 ranks, budget 8192: the 60K and 40K samples need groups of 8 and fill the first round;
  // the 40K group has slack. The 8K samples cost least area on one rank, so without rides they
  // wait for a round of their own; with rides all three join the 40K group at cp 8 (1,000
  // tokens per rank each, within twice their area) and stay below the 60K group
  const dcpp::plan_options o = options_for(16, 8192);
  const std::vector<std::int64_t> lengths{60000, 40000, 8000, 8000, 8000};
  const batch b(o, lengths, tabulation::table);
  const state walk = levelled_on(b, d::levelled_reach{1.05, 0.0, true, 0, false});
  const state ride = levelled_on(b, d::levelled_reach{1.05, 0.0, true, 0, true});
  check_state(walk, b);
  check_state(ride, b);
  const double slack = b.e.cost(60000, 8) - b.e.cost(40000, 8);
  const double rider = b.e.cost(8000, 8);
  REQUIRE(3 * rider < slack);
  REQUIRE(8 * rider < 2 * b.e.cost(8000, 1));
  CHECK(walk.rounds() == 2);
  CHECK(walk.group_of(2) != walk.group_of(1));
  CHECK(walk.max_load(0) == b.e.cost(60000, 8));
  // the first round is no slower, and the second is gone
  CHECK(ride.rounds() == 1);
  CHECK(ride.max_load(0) == walk.max_load(0));
  for (std::int32_t s = 2; s < 5; ++s)
    CHECK(ride.group_of(s) == ride.group_of(1));
  CHECK(ride.step_time() < walk.step_time());
}

TEST_CASE("levelled: the same rounds with the cost table, rows alone, or neither") {
  const d::levelled_reach reach{};
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const batch without(c.options, c.lengths, tabulation::none);
    const auto expected = levelled_on(without, reach).to_plan("t").microbatches;
    for (const tabulation t : {tabulation::rows_only, tabulation::table}) {
      const batch with(c.options, c.lengths, t);
      CHECK(levelled_on(with, reach).to_plan("t").microbatches == expected);
    }
  }
}

TEST_CASE("levelled: ending rounds early changes no round") {
  // Built so that the early end fires: four samples of ~120K tokens need 16 ranks each and fill
  // the 64 ranks of the first round with groups that keep some token room, which the 3,001 short
  // samples after them cannot use (on 16 ranks they would cost far more than 5% extra area); a
  // full scan visits every short sample for nothing. Seeded long-tail batches besides.
  std::vector<std::int64_t> crafted = {121000, 119000, 118000, 117000};
  w::rng r(41);
  for (int i = 0; i < 3001; ++i)
    crafted.push_back(r.uniform_int(200, 900));
  std::vector<std::pair<dcpp::plan_options, std::vector<std::int64_t>>> cases;
  dcpp::plan_options o = options_for(64, 8192);
  cases.emplace_back(o, crafted);
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    o.world_size = seed == 2 ? 96 : 128;
    o.group_topology = seed == 3 ? dcpp::topology::contiguous : dcpp::topology::aligned;
    cases.emplace_back(o, w::long_tail(32 * static_cast<std::size_t>(o.world_size), seed));
  }
  for (const auto& [options, lengths] : cases) {
    CAPTURE(options.world_size);
    const batch b(options, lengths, tabulation::none);
    for (const double heavy : {0.0, 0.4}) {
      const state early = levelled_on(b, {1.05, heavy, true});
      const state full = levelled_on(b, {1.05, heavy, false});
      check_state(early, b);
      CHECK(early.to_plan("t").microbatches == full.to_plan("t").microbatches);
    }
  }
}

TEST_CASE("levelled: a heavy share keeps the two heaviest samples out of one group") {
  // the benchmark's long_tail/48/s2 on one network tier: without the share, its two 128K
  // samples share a group (which then takes as long as both); with it, each has its own
  const dcpp::plan_options o = options_for(48, 8192);
  const std::vector<std::int64_t> lengths = w::long_tail(1536, 2);
  const batch b(o, lengths, tabulation::table, one_tier_h100());
  std::vector<std::int32_t> by_length(lengths.size());
  for (std::size_t s = 0; s < lengths.size(); ++s)
    by_length[s] = static_cast<std::int32_t>(s);
  std::sort(by_length.begin(), by_length.end(), [&](std::int32_t x, std::int32_t y) {
    return lengths[static_cast<std::size_t>(x)] > lengths[static_cast<std::size_t>(y)];
  });
  const std::int32_t first = by_length[0], second = by_length[1];
  const state apart = levelled_on(b, {1.0, 0.4}, 3);
  const state stacked = levelled_on(b, {1.0, 0.0}, 3);
  check_state(apart, b);
  check_state(stacked, b);
  CHECK(apart.group_of(first) != apart.group_of(second));
  CHECK(stacked.group_of(first) == stacked.group_of(second));
}
