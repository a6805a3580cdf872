// Tests for balanced/portfolio.hpp's run: where the second list's plan wins, the passes from the
// first list's best run beside the passes from it on a second thread (past
// `passes_beside_above`, aligned groups, every cost in the table), in turn otherwise; either way
// the plan is the one the portfolio makes without the thread, and no slower than the plan
// without the second list. The passes beside start as soon as the first list ends, and where the
// second list's plan does not win they are the run's own passes.
#include "../../../support.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
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

//! A batch: its options (aligned groups) and lengths.
struct batch_case {
  dcpp::plan_options options;
  std::vector<std::int64_t> lengths;
};

//! A lognormal batch of `samples` with a median of 2,300 tokens on `world` ranks at 16K tokens
//! per rank: the ProLong-like mix (2,048 on 128), or a smaller one.
batch_case prolong_like(std::int32_t world, std::size_t samples) {
  batch_case c;
  c.options.world_size = world;
  c.options.max_tokens_per_rank = 16384;
  c.lengths = lognormal_lengths({world, samples, 16384, 2300, 1.0}, c.options, 1);
  return c;
}

//! The regimes' dense batch: 16 samples per rank on 1,024 ranks, seed 1.
batch_case dense16() {
  const dcpp_bench::planner_case c = dcpp_bench::regime_cases(1)[1];
  REQUIRE(c.name == "dense16/1024/s1");
  return {c.options, c.lengths};
}

//! `c` in topology `t`.
dcpp::plan_options in_topology(const batch_case& c, dcpp::topology t) {
  dcpp::plan_options o = c.options;
  o.group_topology = t;
  return o;
}

//! balanced with the passes beside at every size, and without the second list.
dcpp::balanced passes_always_beside() {
  dcpp::balanced p;
  p.tuning.passes_beside_above = -1;
  return p;
}
dcpp::balanced first_list_only() {
  dcpp::balanced p;
  p.tuning.second_list = false;
  return p;
}

outcome plan_four_ways(const dcpp::plan_options& o, const std::vector<std::int64_t>& lengths) {
  dcpp::balanced without;
  without.tuning.parallel_levelled = false;
  const estimator cost = two_tier();
  return {dcpp::planner(o, cost, dcpp::balanced{}).make_plan(lengths),
          dcpp::planner(o, cost, passes_always_beside()).make_plan(lengths),
          dcpp::planner(o, cost, without).make_plan(lengths),
          dcpp::planner(o, cost, first_list_only()).make_plan(lengths)};
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
  const batch_case dense = dense16();
  const batch_case prolong = prolong_like(128, 2048);
  const batch_case small = prolong_like(64, 256);
  for (const auto& [c, t] :
       {std::pair{&dense, dcpp::topology::aligned}, std::pair{&prolong, dcpp::topology::aligned},
        std::pair{&small, dcpp::topology::contiguous}}) {
    CAPTURE(c->options.world_size);
    CAPTURE(dcpp::to_string(t));
    const dcpp::plan_options in = in_topology(*c, t);
    const std::vector<std::int64_t>& lengths = c->lengths;
    const watched_cost cost;
    const dcpp::plan p = dcpp::planner(in, cost, passes_always_beside()).make_plan(lengths);
    const dcpp::plan q = dcpp::planner(in, cost, first_list_only()).make_plan(lengths);
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
  const batch_case prolong = prolong_like(128, 2048);
  const batch_case dense = dense16();
  int second_won = 0;
  for (const auto& [c, t] : {std::pair{&prolong, dcpp::topology::aligned},
                             std::pair{&prolong, dcpp::topology::contiguous},
                             std::pair{&dense, dcpp::topology::aligned}}) {
    CAPTURE(c->options.world_size);
    CAPTURE(dcpp::to_string(t));
    const dcpp::plan_options in = in_topology(*c, t);
    const std::vector<std::int64_t>& lengths = c->lengths;
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

TEST_CASE("balanced: where the second list's plan does not win, the passes beside are the run's") {
  // small SFT-like batches with the passes forced beside: they start from the first list's best
  // as soon as that list ends, and where the second list's plan does not beat it they are the
  // passes the run keeps (none run on its own thread); the plan is the one made in turn
  struct sft {
    std::int32_t world;
    double median;
    std::uint64_t seed;
  };
  int first_kept = 0;
  for (const sft c : {sft{32, 600, 1}, sft{32, 2300, 2}, sft{32, 6000, 1}, sft{64, 2300, 2}}) {
    CAPTURE(c.world);
    CAPTURE(c.median);
    CAPTURE(c.seed);
    const dcpp_test::balanced_parts::lognormal_batch lb{
        c.world, static_cast<std::size_t>(c.world) * 8, 8192, c.median, 1.0};
    dcpp::plan_options o;
    o.world_size = c.world;
    o.max_tokens_per_rank = 8192;
    const std::vector<std::int64_t> lengths = lognormal_lengths(lb, o, c.seed);
    const outcome r = plan_four_ways(o, lengths);
    check_same(r.beside, r.without_thread);
    check_same(r.by_default, r.without_thread);
    first_kept +=
        r.beside.metrics.estimated_step_time == r.first_list_only.metrics.estimated_step_time ? 1
                                                                                              : 0;
  }
  CHECK(first_kept >= 2); // the first list's passes made the plan on some
}
