// Tests for balanced/portfolio.hpp's run: where the second list's plan wins, the passes from the
// first list's best run beside the passes from it on a second thread (past
// `passes_beside_above`, aligned groups, every cost in the table), in turn otherwise; either way
// the plan is the one the portfolio makes without the thread, and no slower than the plan
// without the second list.
#include "../../../support.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include "dcpp/dcpp.hpp"
#include "parts.hpp"
#include "planner_regimes.hpp"

namespace {
using namespace dcpp_test::balanced_parts;

struct outcome {
  dcpp::plan by_default;
  dcpp::plan beside; // the passes beside at every size
  dcpp::plan without_thread;
  dcpp::plan first_list_only;
};

outcome plan_four_ways(const dcpp::plan_options& o, const std::vector<std::int64_t>& lengths) {
  dcpp::balanced beside;
  beside.tuning.passes_beside_above = -1;
  dcpp::balanced without;
  without.tuning.parallel_levelled = false;
  dcpp::balanced first_only;
  first_only.tuning.second_list = false;
  const estimator cost = two_tier();
  return {dcpp::planner(o, cost, dcpp::balanced{}).make_plan(lengths),
          dcpp::planner(o, cost, beside).make_plan(lengths),
          dcpp::planner(o, cost, without).make_plan(lengths),
          dcpp::planner(o, cost, first_only).make_plan(lengths)};
}

void check_same(const dcpp::plan& p, const dcpp::plan& q) {
  CHECK(p.microbatches == q.microbatches);
  CHECK(p.metrics.estimated_step_time == q.metrics.estimated_step_time);
}

//! The two-tier cost, counting the calls made from a thread other than the one that made it.
struct watched_cost {
  estimator inner = two_tier();
  std::thread::id owner = std::this_thread::get_id();
  std::shared_ptr<std::atomic<long>> calls = std::make_shared<std::atomic<long>>(0);
  std::shared_ptr<std::atomic<long>> elsewhere = std::make_shared<std::atomic<long>>(0);
  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const {
    ++*calls;
    if (std::this_thread::get_id() != owner)
      ++*elsewhere;
    return inner.cost(length, cp);
  }
  [[nodiscard]] auto microbatch_overhead() const { return inner.microbatch_overhead(); }
};

} // namespace

TEST_CASE("balanced: the passes beside never call the estimator from their thread") {
  // the regimes' dense batch, the passes beside by default; the ProLong-like mix with them
  // forced, aligned; and a smaller batch of the same mix on 64 contiguous ranks (its costs in
  // the table), where they run in turn: there the run on the aligned sizes calls the estimator
  const dcpp_bench::planner_case dense = dcpp_bench::regime_cases(1)[1];
  REQUIRE(dense.name == "dense16/1024/s1");
  dcpp::plan_options prolong;
  prolong.world_size = 128;
  prolong.max_tokens_per_rank = 16384;
  const std::vector<std::int64_t> prolong_lengths =
      lognormal_lengths({128, 2048, 16384, 2300, 1.0}, prolong, 1);
  dcpp::plan_options small;
  small.world_size = 64;
  small.max_tokens_per_rank = 16384;
  const std::vector<std::int64_t> small_lengths =
      lognormal_lengths({64, 256, 16384, 2300, 1.0}, small, 1);
  for (const auto& [o, lengths, t] :
       {std::tuple{dense.options, dense.lengths, dcpp::topology::aligned},
        std::tuple{prolong, prolong_lengths, dcpp::topology::aligned},
        std::tuple{small, small_lengths, dcpp::topology::contiguous}}) {
    CAPTURE(o.world_size);
    CAPTURE(dcpp::to_string(t));
    dcpp::plan_options in = o;
    in.group_topology = t;
    dcpp::balanced beside;
    beside.tuning.passes_beside_above = -1;
    dcpp::balanced first_only;
    first_only.tuning.second_list = false;
    const watched_cost cost;
    const dcpp::plan p = dcpp::planner(in, cost, beside).make_plan(lengths);
    const dcpp::plan q = dcpp::planner(in, cost, first_only).make_plan(lengths);
    CHECK(p.metrics.estimated_step_time < q.metrics.estimated_step_time); // the second list won
    CHECK(*cost.calls > 0);
    CHECK(*cost.elsewhere == 0);
  }
}

TEST_CASE("balanced: the passes from the first list's best run beside, to the same plan") {
  // a ProLong-like mix on a tight budget (below `passes_beside_above`: beside only where forced;
  // contiguous groups: in turn) and the regimes' dense batch (16 samples per rank on 1,024
  // ranks, beside by default): the second list's plans win on both, so the passes run from both
  // lists' best plans
  dcpp::plan_options prolong;
  prolong.world_size = 128;
  prolong.max_tokens_per_rank = 16384;
  const std::vector<std::int64_t> prolong_lengths =
      lognormal_lengths({128, 2048, 16384, 2300, 1.0}, prolong, 1);
  const dcpp_bench::planner_case dense = dcpp_bench::regime_cases(1)[1];
  REQUIRE(dense.name == "dense16/1024/s1");
  int second_won = 0;
  for (const auto& [o, lengths, t] :
       {std::tuple{prolong, prolong_lengths, dcpp::topology::aligned},
        std::tuple{prolong, prolong_lengths, dcpp::topology::contiguous},
        std::tuple{dense.options, dense.lengths, dcpp::topology::aligned}}) {
    CAPTURE(o.world_size);
    CAPTURE(dcpp::to_string(t));
    dcpp::plan_options in = o;
    in.group_topology = t;
    const outcome r = plan_four_ways(in, lengths);
    check_same(r.by_default, r.without_thread);
    check_same(r.beside, r.without_thread);
    CHECK(r.by_default.metrics.estimated_step_time <=
          r.first_list_only.metrics.estimated_step_time);
    second_won +=
        r.by_default.metrics.estimated_step_time < r.first_list_only.metrics.estimated_step_time
            ? 1
            : 0;
  }
  CHECK(second_won == 3); // the second list's plan won, and the passes ran from both
}
