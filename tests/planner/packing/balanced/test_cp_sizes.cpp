// Tests for planner/cost_rows.hpp and balanced/cp_sizes.hpp: the cost view reads the same
// numbers with and without a table; the CP sizes against properties checked size by size, and
// the sized and tied constructions' sizes against their rules written out.
#include "../../../support.hpp"

#include <cstddef>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/sized.hpp"
#include "parts.hpp"

namespace {
using namespace dcpp_test::balanced_parts;
namespace d = dcpp::detail;

//! The sizes on s's ladder, written out: its smallest, then doublings up to the largest legal
//! size.
std::vector<std::int32_t> ladder_of(const dcpp::problem& pr, std::int32_t s) {
  std::vector<std::int32_t> out;
  for (std::int64_t c = pr.min_cp_of[static_cast<std::size_t>(s)];
       c <= pr.options.effective_max_cp(); c *= 2)
    out.push_back(static_cast<std::int32_t>(c));
  return out;
}
} // namespace

TEST_CASE("cost_rows: no rows, rows without a table, and the table give the same bits") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const batch without(c.options, c.lengths, tabulation::none);
    REQUIRE(without.costs.rows() == c.lengths.size());
    for (const tabulation t : {tabulation::rows_only, tabulation::table}) {
      const batch with(c.options, c.lengths, t);
      CHECK(with.pr.costs.empty() == (t == tabulation::rows_only));
      CHECK(with.costs.rows() ==
            std::set<std::int64_t>(c.lengths.begin(), c.lengths.end()).size()); // one per length
      for (std::int32_t s = 0; s < with.costs.samples(); ++s) {
        const std::int32_t row = with.costs.row_of(s);
        // a row's first sample has the row's length and comes first
        const std::int32_t first = with.costs.first_sample(static_cast<std::size_t>(row));
        CHECK(first <= s);
        CHECK(c.lengths[static_cast<std::size_t>(first)] == c.lengths[static_cast<std::size_t>(s)]);
        CHECK(without.costs.row_of(s) == s);
        for (const std::int32_t cp : ladder_of(with.pr, s)) {
          const double direct =
              static_cast<double>(estimator{}.cost(c.lengths[static_cast<std::size_t>(s)], cp));
          CHECK(with.costs.cost(s, cp) == direct);
          CHECK(with.costs.row_cost(row, cp) == direct);
          CHECK(without.costs.row_cost(s, cp) == direct);
          CHECK(with.costs.tokens(s, cp) ==
                dcpp::tokens_per_rank(c.options, c.lengths[static_cast<std::size_t>(s)], cp));
        }
      }
    }
  }
}

TEST_CASE("least_area_sizes: the least rank area on the ladder, no larger size for noise") {
  const dcpp::balanced_tuning tuning;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    for (const tabulation t : {tabulation::none, tabulation::rows_only, tabulation::table}) {
      const batch b(c.options, c.lengths, t);
      const d::sample_sizes sizes = d::least_area_sizes(b.costs, tuning);
      for (std::int32_t s = 0; s < b.costs.samples(); ++s) {
        CAPTURE(s);
        const auto us = static_cast<std::size_t>(s);
        const std::int32_t cp = sizes.cp[us];
        CHECK(sizes.cost[us] == b.costs.cost(s, cp));
        const double area = sizes.cost[us] * cp;
        double least = area;
        bool on_ladder = false;
        for (const std::int32_t other : ladder_of(b.pr, s)) {
          const double other_area = b.costs.cost(s, other) * other;
          least = std::min(least, other_area);
          on_ladder = on_ladder || other == cp;
          if (other < cp) // a smaller size is kept unless the larger one saves area
            CHECK(other_area > area);
        }
        CHECK(on_ladder);
        CHECK(area <= least * (1 + 1e-8));
      }
    }
  }
}

TEST_CASE("token_lower_bound: the fewest rounds, in multiples, that hold the rank tokens") {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const batch b(c.options, c.lengths, tabulation::none);
    const d::sample_sizes sizes = d::least_area_sizes(b.costs, dcpp::balanced_tuning{});
    const std::int32_t k = d::token_lower_bound(b.costs, sizes);
    std::int64_t rank_tokens = 0, wide = 0;
    for (std::int32_t s = 0; s < b.costs.samples(); ++s) {
      const std::int32_t cp = sizes.cp[static_cast<std::size_t>(s)];
      rank_tokens += b.costs.tokens(s, cp) * cp;
      wide += 2 * cp > c.options.world_size ? b.costs.tokens(s, cp) : 0;
    }
    const auto holds = [&](std::int64_t rounds) {
      return rounds * c.options.world_size * c.options.max_tokens_per_rank >= rank_tokens &&
             rounds * c.options.max_tokens_per_rank >= wide;
    };
    const std::int32_t m = c.options.microbatch_multiple;
    CHECK(k % m == 0);
    CHECK(holds(k));
    if (k > m)
      CHECK_FALSE(holds(k - m));
  }
}

namespace {
//! The sized construction's rule written out plainly: per pass, the target is the sizes' area
//! over world x rounds; a sample costlier than it takes the first larger size on its ladder
//! within it, else the cheapest larger one that is cheaper than its own; passes while one moves.
std::vector<std::int32_t> raised_by_hand(const batch& b, std::vector<std::int32_t> cp,
                                         std::int32_t rounds, std::int32_t passes) {
  const auto price = [&](std::size_t s, std::int32_t c) {
    return b.costs.cost(static_cast<std::int32_t>(s), c);
  };
  for (std::int32_t pass = 0; pass < passes; ++pass) {
    double area = 0;
    for (std::size_t s = 0; s < cp.size(); ++s)
      area += price(s, cp[s]) * cp[s];
    const double target = area / (static_cast<double>(b.pr.options.world_size) * rounds);
    bool moved = false;
    for (std::size_t s = 0; s < cp.size(); ++s) {
      if (price(s, cp[s]) <= target)
        continue;
      std::int32_t pick = cp[s];
      for (const std::int32_t c : ladder_of(b.pr, static_cast<std::int32_t>(s))) {
        if (c <= cp[s])
          continue;
        if (price(s, c) < price(s, pick))
          pick = c;
        if (price(s, c) <= target)
          break;
      }
      moved = moved || pick != cp[s];
      cp[s] = pick;
    }
    if (!moved)
      break;
  }
  return cp;
}
} // namespace

TEST_CASE("raise_toward_target and target_sizes: the rule written out, sizes only grow") {
  // raise_toward_target: sizes only grow, costs only fall, every cost is the estimator's;
  // target_sizes: its sizes where one is raised, else none
  const dcpp::balanced_tuning tuning;
  int some = 0, none = 0, raised = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const batch b(c.options, c.lengths, tabulation_for(seed));
    const d::sample_sizes least = d::least_area_sizes(b.costs, tuning);
    const std::int32_t k = d::token_lower_bound(b.costs, least);
    d::sample_sizes after = least;
    CHECK(d::raise_toward_target(after, b.costs, k, tuning) > 0);
    for (std::size_t s = 0; s < least.cp.size(); ++s) {
      CHECK(after.cp[s] >= least.cp[s]);
      CHECK(after.cost[s] <= least.cost[s]);
      CHECK(after.cost[s] == b.costs.cost(static_cast<std::int32_t>(s), after.cp[s]));
      raised += after.cp[s] > least.cp[s] ? 1 : 0;
    }
    const auto sized = d::target_sizes(least, b.costs, k, tuning);
    const std::vector<std::int32_t> expected = raised_by_hand(b, least.cp, k, tuning.raise_passes);
    CHECK(after.cp == expected);
    if (!sized) {
      ++none;
      CHECK(expected == least.cp);
      continue;
    }
    ++some;
    CHECK(sized->cp == expected);
    CHECK(sized->cp != least.cp);
    for (std::size_t s = 0; s < least.cp.size(); ++s)
      CHECK(sized->cost[s] == after.cost[s]);
  }
  CHECK(raised > 0);
  CHECK(some > 0);
  CHECK(none > 0);
}

TEST_CASE("tied_sizes: raised while the next size's area ties, the rule written out") {
  // by hand: from the least-area size up the ladder to each size whose area is within a factor
  // (tie_area, or looser) of the current one, passing the others, at most `raises` times (0: no
  // limit); none where no sample is raised, or (no limit) none more than once. The default cost
  // ties (the ring hides behind compute on NVLink) and a slow network does not, so both answers
  // come up. From any start: samples of one length may start at different sizes.
  const dcpp::balanced_tuning tuning;
  int some = 0, none = 0, rows_apart = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    dcpp::device_spec device = dcpp::device_presets[0];
    device.network.intra_node.bytes_per_second = seed % 3 == 0 ? 5e9 : 450e9;
    const batch b(c.options, c.lengths, tabulation_for(seed),
                  dcpp::transformer_cost(dcpp::model_presets[0], device));
    // from the least-area sizes, on odd seeds with every third sample one size up its ladder
    // where it can go (samples of one length, so of one cost row, then start apart)
    d::sample_sizes least = d::least_area_sizes(b.costs, tuning);
    if (seed % 2 == 1)
      for (std::size_t s = 1; s < least.cp.size(); s += 3)
        for (const std::int32_t cp : ladder_of(b.pr, static_cast<std::int32_t>(s)))
          if (cp > least.cp[s]) {
            least.cp[s] = cp;
            least.cost[s] = b.costs.cost(static_cast<std::int32_t>(s), cp);
            break;
          }
    for (std::size_t s = 0; s < least.cp.size(); ++s) {
      const auto row = static_cast<std::size_t>(b.costs.row_of(static_cast<std::int32_t>(s)));
      const auto first = static_cast<std::size_t>(b.costs.first_sample(row));
      rows_apart += least.cp[s] != least.cp[first] ? 1 : 0;
    }
    for (const auto& [raises, tie] :
         {std::pair{1, tuning.tie_area}, std::pair{2, tuning.tie_area},
          std::pair{0, tuning.tie_area}, std::pair{1, 1.05}, std::pair{0, 1.05}}) {
      CAPTURE(raises);
      CAPTURE(tie);
      std::vector<std::int32_t> expected = least.cp;
      std::int32_t most = 0;
      for (std::size_t s = 0; s < least.cp.size(); ++s) {
        const auto id = static_cast<std::int32_t>(s);
        std::int32_t n = 0;
        double area = least.cost[s] * least.cp[s];
        for (const std::int32_t cp : ladder_of(b.pr, id)) {
          if (cp <= expected[s])
            continue;
          if (raises > 0 && n == raises)
            break;
          const double next = b.costs.cost(id, cp) * cp;
          if (next > tie * area)
            continue;
          expected[s] = cp;
          area = next;
          ++n;
        }
        most = std::max(most, n);
      }
      const auto tied = d::tied_sizes(least, b.costs, raises, tie);
      if (most == 0 || (raises == 0 && most == 1)) {
        ++none;
        CHECK(!tied);
        continue;
      }
      ++some;
      REQUIRE(tied);
      CHECK(tied->cp == expected);
      for (std::size_t s = 0; s < least.cp.size(); ++s)
        CHECK(tied->cost[s] == b.costs.cost(static_cast<std::int32_t>(s), tied->cp[s]));
    }
  }
  CHECK(some > 0);
  CHECK(none > 0);
  CHECK(rows_apart > 0); // samples of one row from different starts
}

namespace {
//! Compute alone, linear in the tokens per rank (every size ties in area), but for a ring that
//! shows on 2 ranks alone, 1% of the area: a fit's wobble between its knots.
struct wobbly_cost {
  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const {
    return 1e-6 * static_cast<double>(length) / cp * (cp == 2 ? 1.01 : 1.0);
  }
};
} // namespace

TEST_CASE("tied_sizes: a size that does not tie is passed over, not the end of the climb") {
  const dcpp::balanced_tuning tuning;
  const std::vector<std::int64_t> lengths{700, 3000, 12345, 40000, 99};
  dcpp::problem pr = dcpp::make_problem(options_for(16, 65536), lengths);
  dcpp::tabulate_costs(pr, wobbly_cost{});
  const d::cost_rows<wobbly_cost> costs(pr, wobbly_cost{});
  const d::sample_sizes least = d::least_area_sizes(costs, tuning);
  CHECK(least.cp == std::vector<std::int32_t>(lengths.size(), 1)); // ties: the smallest
  // one raise: past 2 (1% more area) to 4, which ties; no limit: up to the largest size, 16
  const auto once = d::tied_sizes(least, costs, 1, tuning.tie_area);
  REQUIRE(once);
  CHECK(once->cp == std::vector<std::int32_t>(lengths.size(), 4));
  const auto all = d::tied_sizes(least, costs, 0, tuning.tie_area);
  REQUIRE(all);
  CHECK(all->cp == std::vector<std::int32_t>(lengths.size(), 16));
  for (std::size_t s = 0; s < lengths.size(); ++s)
    CHECK(all->cost[s] == costs.cost(static_cast<std::int32_t>(s), 16));
  // within 1% the size of 2 ties too: the one raise takes it
  const auto loose = d::tied_sizes(least, costs, 1, 1.011);
  REQUIRE(loose);
  CHECK(loose->cp == std::vector<std::int32_t>(lengths.size(), 2));
}

TEST_CASE("per_size: a value per size made on first use, found until reset, listed in order") {
  d::per_size<std::vector<int>> per;
  per.reset(5);
  for (std::size_t l = 0; l < 5; ++l)
    CHECK(per.find(l) == nullptr);
  per.make(3, 2, 7).push_back(1); // made from (2, 7): {7, 7}, then 1
  per.make(0).push_back(4);
  per.make(3).push_back(9); // the same one again: the arguments are not used
  REQUIRE(per.find(3) != nullptr);
  CHECK(*per.find(3) == std::vector<int>{7, 7, 1, 9});
  CHECK(*per.find(0) == std::vector<int>{4});
  CHECK(per.find(1) == nullptr);
  CHECK(per.made_sizes() == std::vector<std::size_t>{3, 0});
  std::vector<std::pair<std::size_t, std::size_t>> seen; // (size, length) in the order made
  per.each([&](std::size_t l, std::vector<int>& v) { seen.emplace_back(l, v.size()); });
  CHECK(seen == std::vector<std::pair<std::size_t, std::size_t>>{{3, 4}, {0, 1}});
  const auto& view = per;
  CHECK(view.find(4) == nullptr);
  CHECK(view.find(0)->front() == 4);
  per.reset(2); // forgets every value; sizes from now on are 0 and 1
  CHECK(per.find(0) == nullptr);
  CHECK(per.made_sizes().empty());
  CHECK(per.make(1).empty());
}
