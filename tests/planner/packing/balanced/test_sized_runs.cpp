// Tests for balanced/sized_runs.hpp: the next tied step, built and searched ahead on a second
// thread while another is built, is the run the step gives built and searched in turn; it runs
// ahead only where the cost table holds every entry, is searched there only where the run in
// turn is short of the floor, is dropped where the allowance changed, and a run taken from ahead
// starts none, and a gate given opens once that run is done; a dense batch's loose twin is searched
// only within `loose_tied_within` of the best plan so far; `next_step` against a plain scan; and
// balanced's plans are the same with and without the second thread where the tied steps run.
#include "../../../support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "dcpp/dcpp.hpp"
#include "dcpp/planner/packing/balanced/sized_runs.hpp"
#include "parts.hpp"

namespace {
using namespace dcpp_test::balanced_parts;
namespace d = dcpp::detail;
using runs_type = d::sized_runs<estimator>;
using dcpp::balanced_construction;

//! Both none, or the same rounds.
void check_same(const std::optional<state>& a, const std::optional<state>& b) {
  REQUIRE(a.has_value() == b.has_value());
  if (a)
    CHECK(a->to_plan("t").microbatches == b->to_plan("t").microbatches);
}

} // namespace

TEST_CASE("next_step: the next step of the same list and construction that runs") {
  const std::vector<dcpp::balanced_step> steps = dcpp::balanced_steps({});
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    dcpp::workload::rng r(seed);
    std::vector<bool> running(steps.size());
    for (std::size_t j = 0; j < steps.size(); ++j)
      running[j] = r.uniform() < 0.6;
    const auto runs = [&](std::size_t j) { return static_cast<bool>(running[j]); };
    for (std::size_t i = 0; i < steps.size(); ++i)
      for (const balanced_construction c :
           {balanced_construction::levelled, balanced_construction::tied}) {
        std::size_t expected = steps.size();
        for (std::size_t j = steps.size(); j-- > i + 1;)
          if (running[j] && steps[j].construction == c && steps[j].second == steps[i].second)
            expected = j;
        CHECK(d::next_step(steps, i, c, runs) == expected);
      }
  }
}

TEST_CASE("sized_runs: the tied run ahead is the run in turn, searched as in turn") {
  const dcpp::balanced_tuning on;
  dcpp::balanced_tuning off;
  off.parallel_levelled = false;
  const std::vector<dcpp::balanced_step> steps = dcpp::balanced_steps(on);
  const auto always = [](std::size_t) { return true; };
  // the exact tied step near the bound, and its loose twin after it
  const auto tied_at =
      std::ranges::find(steps, balanced_construction::tied, &dcpp::balanced_step::construction);
  const auto first = static_cast<std::size_t>(tied_at - steps.begin());
  REQUIRE(first < steps.size());
  REQUIRE(steps[first].second);
  const std::size_t twin = d::next_step(steps, first, balanced_construction::tied, always);
  REQUIRE(twin < steps.size());
  CHECK(steps[twin].loose_ties);
  int ran_ahead = 0;
  int built_both = 0;
  int gated = 0;
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (std::uint64_t seed = 1; seed <= 45; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const tabulation t = tabulation_for(seed);
    const batch b(c.options, c.lengths, t, seed % 2 == 0 ? two_tier() : estimator{});
    const d::sample_sizes sizes = d::least_area_sizes(b.costs, on);
    const std::int32_t k_min = d::token_lower_bound(b.costs, sizes);
    const auto allowed = static_cast<std::size_t>(k_min + 1);
    const double floor = seed % 4 == 0 ? 1e300 : 0.0; // every run at the floor: none searched
    const std::int32_t candidates = 1 + static_cast<std::int32_t>(seed % 5);
    // the twin within the same allowance or one more
    const std::size_t second_allowed = seed % 5 == 1 ? allowed + 1 : allowed;
    const auto search = [&](state& a) { // the portfolio's rule: searched unless at the floor
      if (!(a.step_time() <= floor))
        d::improve(a, on, candidates);
    };
    // dense or not; the best plan so far none, or just ahead of the twin's rounds as built, or
    // further ahead than the loose steps' `loose_tied_within` (a dense batch's twin unsearched)
    const bool dense = seed % 3 != 0;
    runs_type probe(b.costs, sizes, steps, k_min, floor, off, dense);
    const std::optional<state> twin_built =
        probe.run(twin, second_allowed, steps.size(), inf, search).built;
    const double best = twin_built && seed % 7 != 3
                            ? twin_built->step_time() / ((seed / 2) % 2 == 0 ? 1.01 : 1.05)
                            : inf;
    runs_type ahead(b.costs, sizes, steps, k_min, floor, on, dense);
    runs_type in_turn(b.costs, sizes, steps, k_min, floor, off, dense);
    d::gate after_ahead; // opens once the run ahead is done or taken, closed where none ran
    ahead.open_when_ahead_done(&after_ahead);
    // the limits: the exact step none, its loose twin `loose_tied_within` on dense batches
    CHECK(ahead.limit(first, best) == inf);
    CHECK(ahead.limit(twin, best) == (dense ? on.loose_tied_within * best : inf));
    const runs_type::result a1 = ahead.run(first, allowed, twin, best, search);
    const runs_type::result b1 = in_turn.run(first, allowed, twin, best, search);
    check_same(a1.built, b1.built);
    CHECK_FALSE(a1.searched.has_value());
    if (a1.built)
      check_state(*a1.built, b);
    // ahead only with every entry in the table, never without the switch; searched there only
    // where the run in turn is short of the floor
    const bool at_floor = a1.built && a1.built->step_time() <= floor;
    CHECK(ahead.ahead_of(twin, allowed) == (t == tabulation::table));
    CHECK_FALSE(in_turn.ahead_of(twin, allowed));
    ran_ahead += ahead.ahead_of(twin, allowed) && second_allowed == allowed ? 1 : 0;
    const runs_type::result a2 = ahead.run(twin, second_allowed, steps.size(), best, search);
    const runs_type::result b2 = in_turn.run(twin, second_allowed, steps.size(), best, search);
    // taken (or dropped for the other allowance), and a run taken from ahead starts none
    for (std::size_t i = 0; i < steps.size(); ++i) {
      CHECK_FALSE(ahead.ahead_of(i, allowed));
      CHECK_FALSE(ahead.ahead_of(i, second_allowed));
    }
    check_same(a2.built, b2.built);
    CHECK(after_ahead.is_open() == (t == tabulation::table));
    CHECK_FALSE(b2.searched.has_value());
    built_both += a1.built && a2.built ? 1 : 0;
    check_same(b2.built, twin_built);
    const bool within = b2.built && b2.built->step_time() <= ahead.limit(twin, best);
    const bool searched_ahead =
        t == tabulation::table && !at_floor && second_allowed == allowed && within;
    REQUIRE(a2.searched.has_value() == searched_ahead);
    gated += t == tabulation::table && !at_floor && second_allowed == allowed && b2.built && !within
                 ? 1
                 : 0;
    if (searched_ahead) {
      check_state(*a2.built, b);
      state searched = *b2.built;
      search(searched);
      if (b2.built->step_time() <= floor) // at the floor: as built
        CHECK(searched.to_plan("t").microbatches == b2.built->to_plan("t").microbatches);
      CHECK(a2.searched->to_plan("t").microbatches == searched.to_plan("t").microbatches);
      CHECK(a2.searched->step_time() == searched.step_time());
      check_state(*a2.searched, b);
    }
  }
  CHECK(ran_ahead >= 8);  // the seeds took runs ahead...
  CHECK(built_both >= 8); // ...and both steps built plans on some
  CHECK(gated >= 2);      // ...and a dense batch's twin was left unsearched on some
}

TEST_CASE("balanced: the tied steps plan the same with and without the second thread") {
  // medium samples on tight budgets (where the tied steps' plans win), and short SFT-like ones
  const lognormal_batch cases[] = {
      {128, 2048, 16384, 2300, 1.0}, {96, 1500, 12288, 3000, 1.0}, {64, 4096, 8192, 900, 1.0}};
  for (std::uint64_t seed = 1; seed <= (dcpp_test::quick() ? 1u : 2u); ++seed)
    for (const lognormal_batch& lb : cases)
      check_same_without_thread(lb, seed, [](const std::vector<std::int64_t>&) {});
}
