// Tests for balanced/exchange.hpp: the tile exchange on hand-made rounds (where it puts each
// tile), on seeded random rounds (legal groups, kept loads, maxima, never slower), and through
// the planner (never slower than without it, every plan valid).
#include "../../../support.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "dcpp/planner/packing/balanced/exchange.hpp"
#include "dcpp/planner/planner.hpp"
#include "parts.hpp"

namespace {
using dcpp::detail::exchanged_group;
using namespace dcpp_test::balanced_parts;

//! (round, first, cp, load) of each group, by its index.
std::vector<std::tuple<std::int32_t, std::int32_t, std::int32_t, double>>
by_index(const std::vector<exchanged_group>& groups) {
  std::vector<std::tuple<std::int32_t, std::int32_t, std::int32_t, double>> out(groups.size());
  for (const exchanged_group& g : groups)
    out[static_cast<std::size_t>(g.index)] = {g.round, g.first, g.cp, g.load};
  return out;
}

double sum(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v)
    s += x;
  return s;
}
} // namespace

TEST_CASE("exchange: the two slow tiles of two rounds meet in one") {
  // world 4, rounds of single-rank groups: loads 5 1 1 1 and 1 5 1 1 (maxima 5 + 5)
  std::vector<exchanged_group> groups;
  const double loads[2][4] = {{5, 1, 1, 1}, {1, 5, 1, 1}};
  for (std::int32_t m = 0; m < 2; ++m)
    for (std::int32_t r = 0; r < 4; ++r)
      groups.push_back({m, r, 1, static_cast<std::int32_t>(groups.size()), loads[m][r]});
  std::vector<double> maxima{5, 5};
  dcpp::balanced_tuning tuning;
  REQUIRE(dcpp::detail::exchange_tiles(groups, maxima, 4, tuning));
  // tiles of 2 first: (5 1) stays in round 0; round 1's (1 5) comes into the place round 0's
  // (1 1) leaves, which goes to round 1's first tile; tiles of 1 then change nothing
  CHECK(maxima == std::vector<double>{5, 1});
  const auto at = by_index(groups);
  using g = std::tuple<std::int32_t, std::int32_t, std::int32_t, double>;
  CHECK(at[0] == g{0, 0, 1, 5});
  CHECK(at[1] == g{0, 1, 1, 1});
  CHECK(at[2] == g{1, 0, 1, 1}); // round 0's second tile, now round 1's first
  CHECK(at[3] == g{1, 1, 1, 1});
  CHECK(at[4] == g{0, 2, 1, 1}); // round 1's first tile, now round 0's second
  CHECK(at[5] == g{0, 3, 1, 5});
  CHECK(at[6] == g{1, 2, 1, 1});
  CHECK(at[7] == g{1, 3, 1, 1});
  // sorted by round and first rank
  CHECK(std::is_sorted(groups.begin(), groups.end()));
  // nothing left to gain: a second call changes nothing
  const auto before = groups;
  CHECK_FALSE(dcpp::detail::exchange_tiles(groups, maxima, 4, tuning));
  CHECK(by_index(groups) == by_index(before));
  // switched off
  tuning.tile_exchange_sweeps = 0;
  std::vector<double> fresh{5, 5};
  CHECK_FALSE(dcpp::detail::exchange_tiles(groups, fresh, 4, tuning));
}

TEST_CASE("exchange: a group across a tile is fixed, and so is the tile it reaches into") {
  // world 8: round 0 holds a 4-rank group on ranks 2-5 (load 9: it crosses the 4-rank tiles)
  // and a slow single rank at 7; round 1 a slow single rank at 0. Tiles of 4 cannot move (the
  // group crosses both); tiles of 2: [0,2) and [6,8) of round 0 are movable, [2,4) and [4,6)
  // are not.
  std::vector<exchanged_group> groups{
      {0, 2, 4, 0, 9.0}, {0, 7, 1, 1, 8.0}, {1, 0, 1, 2, 8.5}, {1, 4, 2, 3, 1.0}};
  std::vector<double> maxima{9.0, 8.5};
  REQUIRE(dcpp::detail::exchange_tiles(groups, maxima, 8, dcpp::balanced_tuning{}));
  CHECK(maxima == std::vector<double>{9.0, 1.0});
  const auto at = by_index(groups);
  CHECK(std::get<0>(at[0]) == 0);
  CHECK(std::get<1>(at[0]) == 2); // fixed
  CHECK(std::get<0>(at[2]) == 0); // the 8.5 joins the 9
  CHECK(std::get<0>(at[3]) == 1);
  // round 0 keeps ranks 2-5 for its group: the 8.5 and the 8 sit at ranks in [0, 2) or [6, 8)
  for (const std::size_t i : {std::size_t{1}, std::size_t{2}}) {
    const std::int32_t first = std::get<1>(at[i]);
    CHECK((first < 2 || first >= 6));
  }
}

TEST_CASE("exchange: random rounds keep legal groups, their loads and sizes, never slower") {
  std::int64_t faster = 0;
  for (std::uint64_t seed = 1; seed <= 400; ++seed) {
    CAPTURE(seed);
    dcpp::workload::rng r(seed);
    const auto world = static_cast<std::int32_t>(r.uniform_int(2, 40));
    const auto rounds = static_cast<std::int32_t>(r.uniform_int(2, 9));
    const bool aligned = r.uniform_int(0, 1) == 0;
    std::vector<exchanged_group> groups;
    std::vector<double> maxima(static_cast<std::size_t>(rounds), 0.0);
    for (std::int32_t m = 0; m < rounds; ++m)
      for (std::int32_t rank = 0; rank < world;) {
        if (r.uniform_int(0, 5) == 0) { // an idle rank
          ++rank;
          continue;
        }
        std::int32_t cp = 1;
        const auto want = static_cast<std::int32_t>(r.uniform_int(1, 16));
        if (aligned) {
          while (cp * 2 <= want && rank % (cp * 2) == 0 && rank + cp * 2 <= world)
            cp *= 2;
        } else {
          cp = std::min(want, world - rank);
        }
        // a few distinct loads, so that ties happen
        const double load = static_cast<double>(r.uniform_int(1, 12)) * 0.25;
        groups.push_back({m, rank, cp, static_cast<std::int32_t>(groups.size()), load});
        maxima[static_cast<std::size_t>(m)] = std::max(maxima[static_cast<std::size_t>(m)], load);
        rank += cp;
      }
    const auto before = by_index(groups);
    const double before_sum = sum(maxima);
    dcpp::balanced_tuning tuning;
    tuning.tile_exchange_sweeps = static_cast<std::int32_t>(r.uniform_int(1, 3));
    const bool changed = dcpp::detail::exchange_tiles(groups, maxima, world, tuning);
    const auto after = by_index(groups);
    REQUIRE(after.size() == before.size());
    // the maxima as the groups give them, and lower exactly when something moved
    std::vector<double> expect(static_cast<std::size_t>(rounds), 0.0);
    std::vector<std::vector<std::int32_t>> owner(
        static_cast<std::size_t>(rounds),
        std::vector<std::int32_t>(static_cast<std::size_t>(world), -1));
    for (std::size_t i = 0; i < after.size(); ++i) {
      const auto [m, first, cp, load] = after[i];
      CHECK(cp == std::get<2>(before[i]));
      CHECK(load == std::get<3>(before[i]));
      REQUIRE(m >= 0);
      REQUIRE(m < rounds);
      REQUIRE(first >= 0);
      REQUIRE(first + cp <= world);
      if (aligned)
        CHECK(first % cp == 0);
      for (std::int32_t k = first; k < first + cp; ++k) {
        auto& o = owner[static_cast<std::size_t>(m)][static_cast<std::size_t>(k)];
        CHECK(o == -1); // disjoint
        o = static_cast<std::int32_t>(i);
      }
      expect[static_cast<std::size_t>(m)] = std::max(expect[static_cast<std::size_t>(m)], load);
    }
    CHECK(maxima == expect);
    if (changed) {
      CHECK(sum(maxima) < before_sum);
      ++faster;
    } else {
      CHECK(after == before);
    }
    CHECK(std::is_sorted(groups.begin(), groups.end()));
  }
  CHECK(faster > 100); // most random rounds have tiles to trade
}

TEST_CASE("exchange: through the planner, never slower than without it, every plan valid") {
  std::int64_t faster = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    dcpp::balanced with;
    dcpp::balanced without;
    without.tuning.tile_exchange_sweeps = 0;
    const estimator e{};
    dcpp::planner<estimator, dcpp::balanced> p_with(c.options, e, with);
    dcpp::planner<estimator, dcpp::balanced> p_without(c.options, e, without);
    if (!p_with.can_plan(c.lengths))
      continue;
    const dcpp::plan a = p_with.make_plan(c.lengths); // validated by the planner
    const dcpp::plan b = p_without.make_plan(c.lengths);
    check_invariants(a, c.options);
    CHECK(a.metrics.estimated_step_time <= b.metrics.estimated_step_time);
    faster += a.metrics.estimated_step_time < b.metrics.estimated_step_time ? 1 : 0;
  }
  MESSAGE("faster with the exchange: ", faster, " of 60 seeds");
}
