// Tests for include/dcpp/route/route.hpp, include/dcpp/route/locality.hpp and
// include/dcpp/core/zigzag.hpp: routes and volumes as pure functions of a plan.
#include "../support.hpp"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "../helpers.hpp"
#include "dcpp/core/zigzag.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/route/locality.hpp"
#include "dcpp/route/route.hpp"
#include "round_trip.hpp"

TEST_CASE("zigzag: chunks, positions and real tokens") {
  // 10 tokens on cp = 2, padded to 12: chunks of 3; rank 0 holds chunks 0 and 3, rank 1 1 and 2.
  static_assert(dcpp::zigzag_chunk_size(12, 2) == 3);
  static_assert(dcpp::zigzag_chunk_index(2, 0, 1) == 3 && dcpp::zigzag_chunk_index(2, 1, 1) == 2);
  CHECK(dcpp::zigzag_position(12, 2, 0, 0) == 0);
  CHECK(dcpp::zigzag_position(12, 2, 0, 3) == 9);
  CHECK(dcpp::zigzag_position(12, 2, 1, 5) == 8);
  CHECK(dcpp::zigzag_real_in_chunk(10, 12, 2, 3) == 1);
  CHECK(dcpp::zigzag_real_in_chunk(10, 12, 2, 2) == 3);
  CHECK(dcpp::zigzag_real_in_chunk(2, 12, 2, 1) == 0);
  // Every position of a padded sample is held exactly once.
  for (std::int64_t cp : {1, 2, 3, 4, 8})
    for (std::int64_t padded = 2 * cp; padded <= 8 * cp; padded += 2 * cp) {
      std::vector<int> hits(static_cast<std::size_t>(padded), 0);
      for (std::int64_t r = 0; r < cp; ++r)
        for (std::int64_t j = 0; j < padded / cp; ++j)
          ++hits[static_cast<std::size_t>(dcpp::zigzag_position(padded, cp, r, j))];
      for (int h : hits)
        CHECK(h == 1);
    }
}

TEST_CASE("sample_origins: rank by rank, offsets within the shard") {
  const std::vector<std::int64_t> counts{2, 0, 1}, lengths{5, 3, 7};
  const auto o = dcpp::sample_origins::from_counts(counts, lengths);
  CHECK(o.rank == std::vector<std::int32_t>{0, 0, 2});
  CHECK(o.offset == std::vector<std::int64_t>{0, 5, 0});
  CHECK(o.first_sample == std::vector<std::int64_t>{0, 2, 2, 3});
  const std::vector<std::int64_t> too_few{1, 1}, negative{1, -1};
  CHECK_THROWS_WITH_AS(dcpp::sample_origins::from_counts(too_few, lengths),
                       "samples_per_rank sums to 2, the batch has 3 samples", dcpp::error);
  CHECK_THROWS_WITH_AS(dcpp::sample_origins::from_counts(negative, lengths),
                       "samples_per_rank[1] = -1 is negative", dcpp::error);
  const std::vector<std::int64_t> too_many{4};
  CHECK_THROWS_AS(dcpp::sample_origins::from_counts(too_many, lengths), dcpp::error);
}

TEST_CASE("route: a hand-checked two-rank plan") {
  // Sample 0 (length 5, held by rank 0) runs on the group [0, 2) in micro-batch 0; sample 1
  // (length 2, held by rank 1) alone on rank 1 in micro-batch 1, where rank 0 is idle.
  dcpp::plan p;
  p.world_size = 2;
  p.max_tokens_per_rank = 8;
  p.lengths = {5, 2};
  p.microbatches.push_back({{{0, 2, {0}}}});
  p.microbatches.push_back({{{1, 1, {1}}}});
  const std::vector<std::int64_t> counts{1, 1};
  const auto o = dcpp::sample_origins::from_counts(counts, p.lengths);
  CHECK(o.rank == std::vector<std::int32_t>{0, 1});
  const auto r0 = dcpp::make_rank_route(p, o, 0, 0);
  const auto r1 = dcpp::make_rank_route(p, o, 0, 1);
  // Padded 8, chunks of 2: rank 0 holds chunks 0 (0,1) and 3 (6,7 -> padding); rank 1 holds
  // chunks 1 (2,3) and 2 (4, and padding).
  CHECK(r0.layout.cu_seqlens == std::vector<std::int32_t>{0, 5});
  CHECK(r0.layout.cu_seqlens_padded == std::vector<std::int32_t>{0, 8});
  CHECK(r0.layout.tokens() == 4);
  CHECK(r0.send[0] == std::vector<dcpp::route_segment>{{0, 0, 2}});
  CHECK(r0.send[1] == std::vector<dcpp::route_segment>{{2, 0, 2}, {4, 2, 1}});
  CHECK(r1.recv[0] == r0.send[1]);
  CHECK(r1.send[0].empty());
  CHECK(r0.tokens_kept_local() == 2);
  CHECK(r0.tokens_sent_remote() == 3);
  const auto r1b = dcpp::make_rank_route(p, o, 1, 1);
  CHECK(r1b.layout.first_rank == 1);
  CHECK(r1b.tokens_kept_local() == 2);
  const auto idle = dcpp::make_rank_route(p, o, 1, 0);
  CHECK(idle.layout.idle());
  CHECK(idle.layout.tokens() == 0);
  const auto v = dcpp::measure_route(p, o);
  CHECK(v == dcpp::route_volume{3, 4, 7});
}

TEST_CASE("route: sends and receives match pairwise and cover every real token once") {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const int world = 1 + static_cast<int>(seed % 8);
    const auto w = dcpp_test::route::make_workload(seed, world);
    dcpp::planner<dcpp::length_squared_cost> planner(w.options);
    const dcpp::plan p = planner.make_plan(w.lengths);
    const auto o = dcpp::sample_origins::from_counts(w.counts, w.lengths);
    std::int64_t local = 0, remote = 0, total = 0;
    for (const auto l : w.lengths)
      total += l;
    for (std::size_t m = 0; m < p.microbatches.size(); ++m) {
      std::vector<dcpp::rank_route> routes;
      for (int r = 0; r < world; ++r)
        routes.push_back(dcpp::make_rank_route(p, o, m, r, w.options.padding_unit));
      for (int a = 0; a < world; ++a) {
        for (int b = 0; b < world; ++b)
          REQUIRE(routes[static_cast<std::size_t>(a)].send[static_cast<std::size_t>(b)] ==
                  routes[static_cast<std::size_t>(b)].recv[static_cast<std::size_t>(a)]);
        local += routes[static_cast<std::size_t>(a)].tokens_kept_local();
        remote += routes[static_cast<std::size_t>(a)].tokens_sent_remote();
      }
    }
    CHECK(local + remote == total);
    CHECK(dcpp::measure_route(p, o, w.options.padding_unit) ==
          dcpp::route_volume{remote, local, total});
  }
}

TEST_CASE("place_for_locality: same step time, valid plan, never less local data") {
  std::int64_t before_sum = 0, after_sum = 0;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const int world = 1 + static_cast<int>(seed % 8);
    const auto w = dcpp_test::route::make_workload(seed, world);
    dcpp::planner<dcpp::length_squared_cost> planner(w.options);
    const dcpp::plan p = planner.make_plan(w.lengths);
    const auto o = dcpp::sample_origins::from_counts(w.counts, w.lengths);
    dcpp::plan q = p;
    const std::int64_t kept = dcpp::place_for_locality(q, o, w.options.padding_unit);
    REQUIRE(dcpp::validate(q, w.options).ok());
    const auto before = dcpp::measure_route(p, o, w.options.padding_unit);
    const auto after = dcpp::measure_route(q, o, w.options.padding_unit);
    CHECK(after.tokens_local == kept);
    CHECK(after.tokens_total == before.tokens_total);
    before_sum += before.tokens_local;
    after_sum += after.tokens_local;
    // Same micro-batches, same groups up to their place: the step time is unchanged.
    dcpp::plan evaluated = q;
    dcpp::evaluate(evaluated, dcpp::make_problem(w.options, w.lengths),
                   dcpp::length_squared_cost{});
    CHECK(evaluated.metrics.estimated_step_time == doctest::Approx(p.metrics.estimated_step_time));
    REQUIRE(q.microbatches.size() == p.microbatches.size());
    for (std::size_t m = 0; m < p.microbatches.size(); ++m) {
      std::vector<std::pair<std::int32_t, std::vector<std::int32_t>>> a, b;
      for (const auto& g : p.microbatches[m].groups)
        a.emplace_back(g.cp, g.samples);
      for (const auto& g : q.microbatches[m].groups)
        b.emplace_back(g.cp, g.samples);
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      CHECK(a == b);
    }
    dcpp::plan again = p; // deterministic
    dcpp::place_for_locality(again, o, w.options.padding_unit);
    CHECK(dcpp::plan_hash(again) == dcpp::plan_hash(q));
  }
  CHECK(after_sum > before_sum);
}
