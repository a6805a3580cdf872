// Tests for balanced/targeted.hpp: the placement order, an exact packing where one exists, no
// assignment when the rounds cannot hold the batch, valid assignments on random batches.
#include "../../../support.hpp"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "dcpp/planner/packing/balanced/targeted.hpp"
#include "parts.hpp"

namespace {
using namespace dcpp_test::balanced_parts;
namespace d = dcpp::detail;
namespace w = dcpp::workload;

//! Every sample in buckets of seeded random sizes, in a shuffled order.
dcpp::bucket_list random_buckets(std::size_t n, w::rng& r) {
  std::vector<std::int32_t> ids(n);
  for (std::size_t i = 0; i < n; ++i)
    ids[i] = static_cast<std::int32_t>(i);
  for (std::size_t i = n; i > 1; --i)
    std::swap(ids[i - 1],
              ids[static_cast<std::size_t>(r.uniform_int(0, static_cast<std::int64_t>(i) - 1))]);
  dcpp::bucket_list buckets;
  for (std::size_t i = 0; i < n;) {
    const auto take = std::min<std::size_t>(n - i, static_cast<std::size_t>(r.uniform_int(1, 9)));
    buckets.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(i),
                         ids.begin() + static_cast<std::ptrdiff_t>(i + take));
    i += take;
  }
  return buckets;
}
} // namespace

TEST_CASE("placement_order: by bucket, then larger CP size, then larger cost, then id") {
  w::rng r(3);
  for (int round = 0; round < 20; ++round) {
    const std::size_t n = static_cast<std::size_t>(r.uniform_int(1, 70));
    d::sample_sizes sizes;
    for (std::size_t s = 0; s < n; ++s) {
      sizes.cp.push_back(std::int32_t{1} << r.uniform_int(0, 3));
      sizes.cost.push_back(static_cast<double>(r.uniform_int(1, 5))); // ties on purpose
    }
    const dcpp::bucket_list buckets = random_buckets(n, r);
    std::vector<std::int32_t> bucket_of(n);
    for (std::size_t b = 0; b < buckets.size(); ++b)
      for (const std::int32_t s : buckets[b])
        bucket_of[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(b);
    std::vector<std::int32_t> expected;
    for (std::size_t s = 0; s < n; ++s)
      expected.push_back(static_cast<std::int32_t>(s));
    std::sort(expected.begin(), expected.end(), [&](std::int32_t a, std::int32_t b) {
      const auto key = [&](std::int32_t s) {
        const auto u = static_cast<std::size_t>(s);
        return std::tuple(bucket_of[u], -sizes.cp[u], -sizes.cost[u], s);
      };
      return key(a) < key(b);
    });
    CHECK(d::placement_order(buckets, sizes) == expected);
  }
}

TEST_CASE("targeted: equal samples fill every rank of every round to the target") {
  // 64 samples of 1,024 tokens on 8 ranks of 4,096: two rounds of four samples per rank
  const dcpp::plan_options o = options_for(8, 4096);
  const std::vector<std::int64_t> lengths(64, 1024);
  const batch b(o, lengths, tabulation::none);
  const dcpp::balanced_tuning tuning;
  d::sample_sizes sizes = d::least_area_sizes(b.costs, tuning);
  REQUIRE(sizes.cp[0] == 1);
  const double target = d::raise_toward_target(sizes, b.costs, 2, tuning);
  CHECK(target == doctest::Approx(4 * sizes.cost[0]));
  const std::vector<std::int32_t> order = d::placement_order({{}}, sizes);
  CHECK(order.empty()); // an empty bucket list places nothing
  std::vector<std::int32_t> all(64);
  for (std::int32_t s = 0; s < 64; ++s)
    all[static_cast<std::size_t>(s)] = s;
  const auto a = d::targeted(b.costs, sizes, target, 2, all, tuning);
  REQUIRE(a.has_value());
  check_state(*a, b);
  CHECK(a->rounds() == 2);
  const double w1 = sizes.cost[0];
  CHECK(a->step_time() ==
        doctest::Approx(2 * (w1 + w1 + w1 + w1) + 2 * dcpp::microbatch_overhead(b.pr, b.e)));
  // one round too few: the tokens do not fit, no assignment
  CHECK_FALSE(d::targeted(b.costs, sizes, target, 1, all, tuning).has_value());
}

TEST_CASE("targeted: valid assignments on random batches, or none") {
  const dcpp::balanced_tuning tuning;
  int built = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const batch b(c.options, c.lengths, tabulation_for(seed));
    w::rng r(seed);
    const dcpp::bucket_list buckets = random_buckets(c.lengths.size(), r);
    const d::sample_sizes least = d::least_area_sizes(b.costs, tuning);
    const std::int32_t k0 = d::token_lower_bound(b.costs, least);
    for (std::int32_t k = k0; k <= 2 * k0 + 4 * c.options.microbatch_multiple;
         k += c.options.microbatch_multiple) {
      d::sample_sizes sizes = least;
      const double target = d::raise_toward_target(sizes, b.costs, k, tuning);
      const auto order = d::placement_order(buckets, sizes);
      if (const auto a = d::targeted(b.costs, sizes, target, k, order, tuning)) {
        check_state(*a, b);
        CHECK(a->rounds() == k);
        ++built;
        break;
      }
    }
  }
  CHECK(built >= 40); // 43 of the 60 batches (tiny budgets and CP caps leave some without one)
}
