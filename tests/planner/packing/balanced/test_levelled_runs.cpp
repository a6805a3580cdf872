// Tests for balanced/levelled_runs.hpp: a dense run built and searched ahead on a second thread
// is the run built in turn and searched as the portfolio searches it; it runs ahead only where
// the cost table holds every entry and is dropped where the allowance changed; and balanced's
// plans on dense batches are the same with and without the second thread.
#include "../../../support.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "dcpp/dcpp.hpp"
#include "dcpp/planner/packing/balanced/levelled_runs.hpp"
#include "parts.hpp"

namespace {
using namespace dcpp_test::balanced_parts;
namespace d = dcpp::detail;
using runs_type = d::levelled_runs<estimator>;

//! The index of the first levelled step and of the dense step after it.
struct dense_pair {
  std::size_t first = 0;
  std::size_t dense = 0;
};
dense_pair dense_steps(const std::vector<dcpp::balanced_step>& steps) {
  dense_pair p;
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (steps[i].construction == dcpp::balanced_construction::levelled) {
      if (p.first == 0)
        p.first = i;
      if (steps[i].dense) {
        p.dense = i;
        break;
      }
    }
  return p;
}
} // namespace

TEST_CASE("levelled_runs: the dense run ahead is the run in turn, searched as in turn") {
  const dcpp::balanced_tuning on;
  dcpp::balanced_tuning off;
  off.parallel_levelled = false;
  const std::vector<dcpp::balanced_step> steps = dcpp::balanced_steps(on);
  const dense_pair p = dense_steps(steps);
  REQUIRE(p.dense > p.first);
  int ran_ahead = 0;
  for (std::uint64_t seed = 1; seed <= 45; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const tabulation t = tabulation_for(seed);
    const batch b(c.options, c.lengths, t);
    const d::sample_sizes sizes = d::least_area_sizes(b.costs, on);
    const auto allowed = static_cast<std::size_t>(d::token_lower_bound(b.costs, sizes) + 1);
    const double floor = seed % 4 == 0 ? 1e300 : 0.0; // every run at the floor: none searched
    const std::int32_t candidates = 1 + static_cast<std::int32_t>(seed % 5);
    // the two runs of a dense batch, the second within the same allowance or one more
    const std::size_t second_allowed = seed % 5 == 1 ? allowed + 1 : allowed;
    const auto only_pair = [&](std::size_t i) { return i == p.first || i == p.dense; };
    // the portfolio's rule: searched unless at the floor
    const auto search = [&](state& a) {
      if (!(a.step_time() <= floor))
        d::improve(a, on, candidates);
    };
    runs_type ahead(b.costs, sizes, steps, on, true);
    runs_type in_turn(b.costs, sizes, steps, off, true);
    ahead.count(only_pair);
    in_turn.count(only_pair);
    const runs_type::result a1 = ahead.run(p.first, allowed, p.dense, search);
    const runs_type::result b1 = in_turn.run(p.first, allowed, p.dense, search);
    CHECK(a1.built.to_plan("t").microbatches == b1.built.to_plan("t").microbatches);
    CHECK_FALSE(a1.searched.has_value());
    // ahead only with every entry in the table, never without the switch
    CHECK(ahead.ahead_of(p.dense, allowed) == (t == tabulation::table));
    CHECK_FALSE(in_turn.ahead_of(p.dense, allowed));
    ran_ahead += ahead.ahead_of(p.dense, allowed) && second_allowed == allowed ? 1 : 0;
    const runs_type::result a2 = ahead.run(p.dense, second_allowed, steps.size(), search);
    const runs_type::result b2 = in_turn.run(p.dense, second_allowed, steps.size(), search);
    CHECK_FALSE(ahead.ahead_of(p.dense, allowed));
    CHECK(a2.built.to_plan("t").microbatches == b2.built.to_plan("t").microbatches);
    check_state(a2.built, b);
    CHECK_FALSE(b2.searched.has_value());
    const bool searched_ahead = t == tabulation::table && second_allowed == allowed;
    REQUIRE(a2.searched.has_value() == searched_ahead);
    if (searched_ahead) {
      state searched = b2.built;
      search(searched);
      if (a2.built.step_time() <= floor) // at the floor: as built
        CHECK(searched.to_plan("t").microbatches == b2.built.to_plan("t").microbatches);
      CHECK(a2.searched->to_plan("t").microbatches == searched.to_plan("t").microbatches);
      CHECK(a2.searched->step_time() == searched.step_time());
      check_state(*a2.searched, b);
    }
  }
  CHECK(ran_ahead >= 8); // the seeds took runs ahead
}

TEST_CASE("balanced: dense batches plan the same with and without the second thread") {
  // dense: past wide_raise_above (samples x ranks), at most 16 samples per rank
  const lognormal_batch cases[] = {{1024, 4501, 8192, 2048, 1.19},
                                   {1024, 9999, 16384, 2048, 1.19},
                                   {768, 6000, 12288, 2048, 1.19}};
  for (std::uint64_t seed = 1; seed <= (dcpp_test::quick() ? 1u : 3u); ++seed)
    for (const lognormal_batch& lb : cases)
      check_same_without_thread(lb, seed, [&](const std::vector<std::int64_t>& lengths) {
        REQUIRE(dcpp::balanced_tuning{}.dense(static_cast<std::int64_t>(lengths.size()), lb.world));
      });
}
