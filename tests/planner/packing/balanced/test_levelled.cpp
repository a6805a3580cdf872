// Tests for balanced/levelled.hpp: valid rounds on random batches, the same rounds with and
// without a cost table, and neither the early end of a round nor deferring a row's alike misses
// together changing anything.
#include "../../../support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
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

TEST_CASE("levelled: deferring a row's alike misses together changes no round") {
  // Batches of few distinct lengths, so that rows have many samples: seeded random cases whose
  // lengths are drawn from a pool of 1-6 of their own, and long-tail batches rounded to 2K
  // multiples. Some rows end split over two CP sizes (raised or joined a larger group while the
  // rest waited), which is when a row's samples stop being alike: the test needs such rows.
  std::vector<std::pair<dcpp::plan_options, std::vector<std::int64_t>>> cases;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    random_case c = make_random_case(seed);
    w::rng r(seed + 500);
    const auto pool = static_cast<std::size_t>(r.uniform_int(1, 6));
    std::vector<std::int64_t> lengths(c.lengths.size() * 3);
    for (auto& l : lengths)
      l = c.lengths[static_cast<std::size_t>(
          r.uniform_int(0, static_cast<std::int64_t>(std::min(pool, c.lengths.size())) - 1))];
    cases.emplace_back(c.options, std::move(lengths));
  }
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    dcpp::plan_options o = options_for(seed % 2 == 0 ? 64 : 48, 8192);
    o.microbatch_multiple = seed == 3 ? 2 : 1;
    std::vector<std::int64_t> lengths =
        w::long_tail(40 * static_cast<std::size_t>(o.world_size), seed);
    for (auto& l : lengths)
      l = std::max<std::int64_t>(2048, l / 2048 * 2048);
    cases.emplace_back(o, std::move(lengths));
  }
  std::int64_t split_rows = 0;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const auto& [options, lengths] = cases[k];
    CAPTURE(k);
    const batch b(options, lengths, tabulation_for(k));
    for (d::levelled_reach reach :
         {d::levelled_reach{1.05, 0.0}, d::levelled_reach{1.0, 0.4},
          d::levelled_reach{1.05, 0.0, true, 1.25}, d::levelled_reach{1.05, 0.0, true, 0, true}}) {
      for (const std::int64_t extra : {0, 2}) {
        const state skipping = levelled_on(b, reach, extra);
        reach.skip_alike = false;
        const state one_by_one = levelled_on(b, reach, extra);
        reach.skip_alike = true;
        check_state(skipping, b);
        CHECK(skipping.to_plan("t").microbatches == one_by_one.to_plan("t").microbatches);
        std::map<std::int64_t, std::set<std::int32_t>> sizes;
        for (std::int32_t s = 0; s < static_cast<std::int32_t>(lengths.size()); ++s)
          sizes[lengths[static_cast<std::size_t>(s)]].insert(skipping.cp_of(s));
        for (const auto& [length, cps] : sizes)
          split_rows += cps.size() > 1 ? 1 : 0;
      }
    }
  }
  CHECK(split_rows > 0);
}

TEST_CASE("halve_to_multiple: halves share their groups' ranks, samples dealt by cost") {
  // one round on 4 ranks: a group of four samples on rank 0, a single sample on rank 1, a pair
  // on ranks 2-3; a multiple of 2 halves it
  const dcpp::plan_options o = [] {
    dcpp::plan_options x = options_for(4, 8192);
    x.microbatch_multiple = 2;
    return x;
  }();
  const std::vector<std::int64_t> lengths{4000, 3000, 2000, 1000, 6000, 9000, 8000};
  const batch b(o, lengths, tabulation::table);
  std::vector<d::microbatch_state> rounds;
  rounds.emplace_back(4);
  auto& mb = rounds.back();
  const auto add_group = [&](std::int32_t first, std::int32_t cp, std::vector<std::int32_t> ss) {
    const std::int32_t g = mb.open(first, cp);
    for (const std::int32_t s : ss)
      mb.add(g, s, b.costs.tokens(s, cp), b.costs.cost(s, cp));
  };
  add_group(0, 1, {3, 1, 0, 2});
  add_group(1, 1, {4});
  add_group(2, 2, {6, 5});
  d::levelled_detail::halve_to_multiple(rounds, b.costs);
  REQUIRE(rounds.size() == 2);
  const auto samples_at = [&](std::size_t m, std::int32_t first) {
    for (const auto& g : rounds[m].groups())
      if (g.first_rank == first && g.cp > 0)
        return g.samples;
    return std::vector<std::int32_t>{};
  };
  // longest processing time: 4000 to the first half, 3000 to the second, 2000 to the second
  // (lighter), 1000 to the first; 9000 first, 8000 second
  CHECK(samples_at(0, 0) == std::vector<std::int32_t>{0, 3});
  CHECK(samples_at(1, 0) == std::vector<std::int32_t>{1, 2});
  CHECK(samples_at(0, 2) == std::vector<std::int32_t>{5});
  CHECK(samples_at(1, 2) == std::vector<std::int32_t>{6});
  // the single sample goes whole to the half with less area at its turn: the second (3000 and
  // 2000 cost less than 4000 and 1000, attention being superlinear), whose rank 1 is busy while
  // the first's is idle
  const auto c = [&](std::int32_t s) { return b.costs.cost(s, 1); };
  REQUIRE(c(1) + c(2) < c(0) + c(3));
  CHECK(samples_at(0, 1).empty());
  CHECK(samples_at(1, 1) == std::vector<std::int32_t>{4});
  for (const auto& round : rounds)
    for (const auto& g : round.groups()) {
      double load = 0;
      std::int64_t tokens = 0;
      for (const std::int32_t s : g.samples) {
        load += b.costs.cost(s, g.cp);
        tokens += b.costs.tokens(s, g.cp);
      }
      CHECK(g.load == doctest::Approx(load).epsilon(1e-12));
      CHECK(g.tokens == tokens);
    }
}

TEST_CASE("levelled: a micro-batch multiple on many small samples keeps every rank working") {
  // 2,500 samples of 1-64 tokens on 6 ranks make 4 rounds; a multiple of 16 halves them inside
  // their groups (every rank keeps working, within 1% of the bound before any search), where a
  // split by groups idles half the ranks of every round (about twice the bound)
  dcpp::plan_options o = options_for(6, 4096);
  o.microbatch_multiple = 16;
  w::rng r(11);
  std::vector<std::int64_t> lengths(2500);
  for (auto& l : lengths)
    l = r.uniform_int(1, 64);
  const batch b(o, lengths, tabulation::table);
  const state a = levelled_on(b, d::levelled_reach{});
  check_state(a, b);
  CHECK(a.rounds() == 16);
  for (const dcpp::plan_microbatch& mb : a.to_plan("t").microbatches) {
    std::int32_t busy = 0;
    for (const dcpp::plan_group& g : mb.groups)
      busy += g.cp;
    CHECK(busy == 6);
  }
  CHECK(a.step_time() < 1.01 * dcpp::lower_bound(b.pr, b.e));
  // with fewer samples than groups the split is by groups, as before
  dcpp::plan_options few = options_for(16, 8192);
  few.microbatch_multiple = 4;
  const batch sparse(few, w::long_tail(12, 5), tabulation::table);
  check_state(levelled_on(sparse, d::levelled_reach{}), sparse);
}
