// Tests for include/dcpp/route/router.hpp on the local backend: thousands of seeded workloads on
// 1-8 ranks routed and routed back, and disagreeing inputs failing on every rank at once.
#include "../support.hpp"

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "dcpp/comm/local.hpp"
#include "every_rank.hpp"
#include "round_trip.hpp"

TEST_CASE("router: conservation and bit-exact round trip, 2400 workloads on 1-8 ranks") {
  // the sanitizer build (DCPP_TESTS_QUICK) routes the first 800: every world size and both
  // placements, at a third of the suite's time there
  const std::uint64_t workloads = dcpp_test::quick() ? 800 : 2400;
  for (std::uint64_t seed = 0; seed < workloads; ++seed) {
    const int world = 1 + static_cast<int>(seed % 8);
    const auto where =
        seed % 5 == 0 ? dcpp::placement::as_planned : dcpp::placement::locality_aware;
    CAPTURE(seed);
    REQUIRE_NOTHROW(dcpp::run_local(
        world, [&](dcpp::local_communicator& c) { dcpp_test::route::run(c, seed, where); }));
  }
}

namespace {
using dcpp_test::route::messages_on_every_rank;
} // namespace

TEST_CASE("router: a shard with a wrong field size fails on every rank with the same message") {
  const auto messages = messages_on_every_rank(4, [](dcpp::local_communicator& c) {
    const auto w = dcpp_test::route::make_workload(11, c.size());
    auto shard = dcpp_test::route::make_shard(w, c.rank(), 11);
    if (c.rank() == 2)
      shard.get<dcpp::fields::labels>().push_back(7);
    dcpp::planner<dcpp::length_squared_cost> planner(w.options);
    (void)dcpp::plan_step(planner, c, shard);
  });
  for (const auto& m : messages)
    CHECK(m.starts_with("rank 2: field 'labels' holds"));
  CHECK(messages[0] == messages[3]);
}

TEST_CASE("router: ranks with different options or plans fail together") {
  const auto options = messages_on_every_rank(3, [](dcpp::local_communicator& c) {
    auto w = dcpp_test::route::make_workload(5, c.size());
    if (c.rank() == 1)
      w.options.max_tokens_per_rank += 1;
    dcpp::planner<dcpp::length_squared_cost> planner(w.options);
    (void)dcpp::plan_step(planner, c, dcpp_test::route::make_shard(w, c.rank(), 5));
  });
  for (const auto& m : options)
    CHECK(m.starts_with("plan_step: ranks were given different plan options: "
                        "max_tokens_per_rank ranges from "));

  // A rank that builds its router from a different length list (its own view of the batch).
  const auto plans = messages_on_every_rank(3, [](dcpp::local_communicator& c) {
    const auto w = dcpp_test::route::make_workload(6, c.size());
    auto lengths = w.lengths;
    if (c.rank() == 0)
      lengths.back() += 1;
    dcpp::planner<dcpp::length_squared_cost> planner(w.options);
    auto counts = w.counts;
    using R = dcpp::router<dcpp::local_communicator, dcpp::fields::token_ids>;
    R router(c, planner.make_plan(lengths), dcpp::sample_origins::from_counts(counts, lengths));
  });
  for (const auto& m : plans)
    CHECK(m.starts_with("ranks disagree on the plan (hash)"));
}

TEST_CASE("router: a shard that does not match the plan, and combine size errors") {
  const auto messages = messages_on_every_rank(2, [](dcpp::local_communicator& c) {
    const auto w = dcpp_test::route::make_workload(3, c.size());
    const auto shard = dcpp_test::route::make_shard(w, c.rank(), 3);
    dcpp::planner<dcpp::length_squared_cost> planner(w.options);
    auto router = dcpp::plan_step(planner, c, shard);
    auto other = shard;
    if (c.rank() == 1 && !other.lengths.empty()) {
      other.lengths.back() += 1;
      other.get<dcpp_test::route::token_tag>().push_back(0);
      other.get<dcpp::fields::token_ids>().push_back(0);
      other.get<dcpp::fields::labels>().push_back(0);
      other.get<dcpp::fields::loss_mask>().push_back(0);
      other.get<dcpp_test::route::advantage>().push_back(0);
    } else if (c.rank() == 1) {
      other.lengths.push_back(1);
    }
    (void)router.dispatch(0, other);
  });
  for (const auto& m : messages)
    CHECK(m.starts_with("rank 1: "));

  const auto combine = messages_on_every_rank(2, [](dcpp::local_communicator& c) {
    const auto w = dcpp_test::route::make_workload(3, c.size());
    const auto shard = dcpp_test::route::make_shard(w, c.rank(), 3);
    dcpp::planner<dcpp::length_squared_cost> planner(w.options);
    auto router = dcpp::plan_step(planner, c, shard);
    const auto batch = router.dispatch(0, shard);
    std::vector<float> values(static_cast<std::size_t>(batch.tokens()) + (c.rank() == 0 ? 1 : 0));
    std::vector<float> back(static_cast<std::size_t>(router.shard_tokens()));
    router.combine(0, std::span<const float>(values), std::span<float>(back));
  });
  for (const auto& m : combine)
    CHECK(m.starts_with("rank 0: combine: micro-batch 0 buffer holds"));
}

TEST_CASE("router: a stage routes its own fields from a shard that fills only those") {
  dcpp::run_local(3, [](dcpp::local_communicator& c) {
    const auto w = dcpp_test::route::make_workload(23, c.size());
    const auto full = dcpp_test::route::make_shard(w, c.rank(), 23);
    dcpp::planner<dcpp::length_squared_cost> planner(w.options);
    auto router = dcpp::plan_step(planner, c, full);
    auto first_stage = full; // the first stage holds token ids and nothing else
    first_stage.get<dcpp::fields::labels>().clear();
    first_stage.get<dcpp::fields::loss_mask>().clear();
    first_stage.get<dcpp_test::route::token_tag>().clear();
    first_stage.get<dcpp_test::route::advantage>().clear();
    for (std::size_t m = 0; m < router.microbatches(); ++m) {
      const auto expected = router.dispatch(m, full);
      const auto got = router.dispatch_only<dcpp::fields::token_ids>(m, first_stage);
      CHECK(got.get<dcpp::fields::token_ids>() == expected.get<dcpp::fields::token_ids>());
      CHECK(got.get<dcpp::fields::labels>().empty());
      CHECK(got.layout == expected.layout);
      CHECK(got.is_real == expected.is_real);
      const auto metadata = router.layout_only(m);
      CHECK(metadata.position_ids == expected.position_ids);
      CHECK(metadata.get<dcpp::fields::token_ids>().empty());
    }
    // a field it names but did not fill is still an error, on every rank
    CHECK_THROWS_WITH_AS((void)router.dispatch_only<dcpp::fields::labels>(0, first_stage),
                         doctest::Contains("field 'labels' holds 0 values"), dcpp::error);
  });
}
