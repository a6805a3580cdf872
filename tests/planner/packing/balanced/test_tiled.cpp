// Tests for balanced/tiled.hpp: the tiling of the world, and the tiled construction's plans on
// seeded random batches (valid, every sample once, the same tiling in every round).
#include "../../../support.hpp"

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "dcpp/planner/bounds/budget_lower_bound.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/tiled.hpp"
#include "parts.hpp"

namespace {
using namespace dcpp_test::balanced_parts;
namespace d = dcpp::detail;
using tiles = std::vector<std::pair<std::int32_t, std::int32_t>>;

tiles tiling_of(std::int32_t world, std::int32_t widest, dcpp::topology t) {
  dcpp::plan_options o = options_for(world, 8192);
  o.group_topology = t;
  return d::world_tiling(dcpp::make_problem(o, std::vector<std::int64_t>{100}), widest);
}
} // namespace

TEST_CASE("world_tiling: the largest legal size first, aligned to its size") {
  using enum dcpp::topology;
  CHECK(tiling_of(48, 32, aligned) == tiles{{0, 32}, {32, 16}});
  CHECK(tiling_of(24, 16, aligned) == tiles{{0, 16}, {16, 8}});
  CHECK(tiling_of(96, 64, aligned) == tiles{{0, 64}, {64, 32}});
  CHECK(tiling_of(40, 32, aligned) == tiles{{0, 32}, {32, 8}});
  CHECK(tiling_of(12, 8, aligned) == tiles{{0, 8}, {8, 4}});
  CHECK(tiling_of(64, 16, aligned) == tiles{{0, 16}, {16, 16}, {32, 16}, {48, 16}});
  // contiguous groups take any size and start anywhere
  CHECK(tiling_of(40, 24, contiguous) == tiles{{0, 24}, {24, 16}});
  CHECK(tiling_of(7, 7, contiguous) == tiles{{0, 7}});
}

TEST_CASE("tiled: valid plans, every sample once, each round the world's tiling") {
  int made = 0, tried = 0;
  for (std::uint64_t seed = 1; seed <= 150; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const batch b(c.options, c.lengths, tabulation_for(seed));
    std::int32_t smallest = 1;
    for (const std::int32_t m : b.pr.min_cp_of)
      smallest = std::max(smallest, m);
    for (const std::int32_t widest : b.pr.cp_sizes) {
      CAPTURE(widest);
      const auto p = d::tiled(b.costs, widest, "tiled", std::int64_t{1} << 24,
                              std::numeric_limits<std::int64_t>::max());
      if (widest < smallest) {
        CHECK(!p); // some sample cannot use the widest group
        continue;
      }
      ++tried;
      if (!p)
        continue; // rounds left empty that the micro-batch multiple needs
      ++made;
      dcpp::plan q = *p;
      dcpp::evaluate(q, b.pr, b.e);
      check_invariants(q, c.options);
      const auto layout = d::world_tiling(b.pr, widest);
      for (const auto& mb : q.microbatches) {
        CHECK(!mb.groups.empty());
        for (const auto& g : mb.groups)
          CHECK(std::find(layout.begin(), layout.end(), std::pair{g.first_rank, g.cp}) !=
                layout.end());
      }
    }
  }
  // nearly every size the longest sample fits makes a plan (164 of 176 here)
  CHECK(tried > 150);
  CHECK(made * 10 > tried * 9);
}

TEST_CASE("tiled: refused past its round and work limits") {
  const dcpp::plan_options o = options_for(24, 8192);
  const auto lengths = dcpp::workload::long_tail(300, 4, 0.025, 98304);
  const batch b(o, lengths, tabulation::table);
  constexpr auto unlimited = std::numeric_limits<std::int64_t>::max();
  const auto p = d::tiled(b.costs, 16, "tiled", unlimited, unlimited);
  REQUIRE(p);
  const auto rounds = static_cast<std::int64_t>(p->microbatches.size());
  CHECK(d::tiled(b.costs, 16, "tiled", unlimited, rounds));
  CHECK(!d::tiled(b.costs, 16, "tiled", unlimited, rounds - 1));
  // the work examined: samples x rounds x groups per round (two: 16 + 8)
  CHECK(d::tiled(b.costs, 16, "tiled", 300 * rounds * 2, unlimited));
  CHECK(!d::tiled(b.costs, 16, "tiled", 300 * rounds * 2 - 1, unlimited));
}

TEST_CASE("tiled: a size that does not divide the world balances under length^2/cp") {
  // the benchmark's long_tail/24/s2: 768 samples up to 96K on 24 ranks, 8,192 tokens per rank;
  // the widest size, 16, leaves 8 ranks for a group of 8 each round. balanced had 0.913 of the
  // budget-aware bound without this construction (0.930 since the last, wider search)
  const dcpp::plan_options o = options_for(24, 8192);
  const auto lengths = dcpp::workload::long_tail(768, 2, 0.025, 98304);
  const dcpp::problem pr = dcpp::make_problem(o, lengths);
  const double bound = dcpp::budget_lower_bound(pr, dcpp::length_squared_cost{});
  dcpp::balanced without;
  without.constructions = dcpp::balanced{}.constructions &
                          ~(dcpp::balanced::construct_static | dcpp::balanced::construct_chunked |
                            dcpp::balanced::construct_bisected);
  const auto before = run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{}, without);
  const auto p = run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{});
  check_invariants(p, o);
  CHECK(bound / before.metrics.estimated_step_time < 0.935);
  CHECK(bound / p.metrics.estimated_step_time > 0.96);
}
