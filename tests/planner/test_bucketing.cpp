// Tests for include/dcpp/planner/bucketing.hpp.
#include "../support.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dcpp/planner/bucketing.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
struct bad_bucketing {
  int buckets(const dcpp::problem&) const { return 0; }
};

bool is_partition(const dcpp::bucket_list& b, std::size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& bucket : b)
    for (const auto s : bucket) {
      if (s < 0 || static_cast<std::size_t>(s) >= n)
        return false;
      ++seen[static_cast<std::size_t>(s)];
    }
  return std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; });
}

dcpp::problem sample_problem(std::uint64_t seed, std::size_t n) {
  dcpp::plan_options o;
  o.world_size = 32;
  o.max_tokens_per_rank = 4096;
  return dcpp::make_problem(o, dcpp::workload::bimodal(n, seed));
}
} // namespace

TEST_CASE("bucketing: concept") {
  static_assert(dcpp::bucketing_policy<dcpp::by_cp_size>);
  static_assert(dcpp::bucketing_policy<dcpp::single_bucket>);
  static_assert(dcpp::bucketing_policy<dcpp::by_work_quantile>);
  static_assert(!dcpp::bucketing_policy<bad_bucketing>);
}

TEST_CASE("bucketing: every policy partitions the samples, on seeded batches of awkward sizes") {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    const std::size_t n = 1 + seed * 37 % 301;
    const auto p = sample_problem(seed, n);
    std::vector<double> work(n);
    for (std::size_t i = 0; i < n; ++i)
      work[i] = static_cast<double>(p.lengths[i] * p.lengths[i]);
    CHECK(is_partition(dcpp::by_cp_size{}.buckets(p, work), n));
    CHECK(is_partition(dcpp::single_bucket{}.buckets(p, work), n));
    CHECK(is_partition(dcpp::by_work_quantile{7}.buckets(p, work), n));
    CHECK(is_partition(dcpp::by_work_quantile{0}.buckets(p, work), n));
  }
}

TEST_CASE("bucketing: by_cp_size puts larger CP sizes first, longest first inside") {
  const auto p = sample_problem(3, 500);
  const std::vector<double> work(500, 1.0);
  const auto b = dcpp::by_cp_size{}.buckets(p, work);
  REQUIRE(b.size() >= 2);
  std::int32_t previous_cp = 1 << 30;
  for (const auto& bucket : b) {
    const std::int32_t cp = p.min_cp_of[static_cast<std::size_t>(bucket.front())];
    CHECK(cp < previous_cp);
    previous_cp = cp;
    for (std::size_t i = 0; i < bucket.size(); ++i) {
      CHECK(p.min_cp_of[static_cast<std::size_t>(bucket[i])] == cp);
      if (i > 0)
        CHECK(p.lengths[static_cast<std::size_t>(bucket[i - 1])] >=
              p.lengths[static_cast<std::size_t>(bucket[i])]);
    }
  }
}

TEST_CASE("bucketing: by_cp_size equals a comparison sort, aligned and contiguous topologies") {
  // reference: every id sorted by (larger smallest CP size, longer, lower id), cut where the
  // size changes; batches of awkward sizes on both sides of the sort's 256-id bucket threshold
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    dcpp::plan_options o;
    o.world_size = seed % 2 == 0 ? 48 : 40;
    o.max_tokens_per_rank = 2048;
    o.group_topology = seed % 3 == 0 ? dcpp::topology::contiguous : dcpp::topology::aligned;
    const std::size_t n = 3 + seed * 409 % 2999;
    const auto p = dcpp::make_problem(o, dcpp::workload::pareto(n, seed, 1.1, 60000));
    std::vector<std::int32_t> ids(n);
    for (std::size_t i = 0; i < n; ++i)
      ids[i] = static_cast<std::int32_t>(i);
    std::sort(ids.begin(), ids.end(), [&](std::int32_t a, std::int32_t b) {
      const auto ua = static_cast<std::size_t>(a);
      const auto ub = static_cast<std::size_t>(b);
      if (p.min_cp_of[ua] != p.min_cp_of[ub])
        return p.min_cp_of[ua] > p.min_cp_of[ub];
      if (p.lengths[ua] != p.lengths[ub])
        return p.lengths[ua] > p.lengths[ub];
      return a < b;
    });
    dcpp::bucket_list expected;
    for (std::size_t i = 0; i < n; ++i) {
      if (i == 0 || p.min_cp_of[static_cast<std::size_t>(ids[i])] !=
                        p.min_cp_of[static_cast<std::size_t>(ids[i - 1])])
        expected.emplace_back();
      expected.back().push_back(ids[i]);
    }
    const std::vector<double> work(n, 1.0);
    CHECK(dcpp::by_cp_size{}.buckets(p, work) == expected);
  }
}

TEST_CASE("bucketing: work quantiles are ordered and of near-equal size") {
  const auto p = sample_problem(9, 103);
  std::vector<double> work(103);
  for (std::size_t i = 0; i < 103; ++i)
    work[i] = static_cast<double>((i * 7919) % 103);
  const auto b = dcpp::by_work_quantile{4}.buckets(p, work);
  REQUIRE(b.size() == 4);
  for (const auto& bucket : b)
    CHECK((bucket.size() == 25 || bucket.size() == 26));
  for (std::size_t k = 1; k < b.size(); ++k)
    CHECK(work[static_cast<std::size_t>(b[k - 1].back())] >=
          work[static_cast<std::size_t>(b[k].front())]);
}

TEST_CASE("make_buckets: the policy's buckets, or an error naming the sample it got wrong") {
  const auto pr = sample_problem(5, 77);
  const dcpp::length_squared_cost e;
  std::vector<double> work(pr.size());
  for (std::size_t i = 0; i < pr.size(); ++i)
    work[i] = e.cost(pr.lengths[i], pr.min_cp_of[i]);
  // the work it hands the policy is each sample's cost on its smallest size
  CHECK(dcpp::make_buckets(dcpp::single_bucket{}, pr, e) ==
        dcpp::single_bucket{}.buckets(pr, work));
  CHECK(dcpp::make_buckets(dcpp::by_cp_size{}, pr, e) == dcpp::by_cp_size{}.buckets(pr, work));
  // a policy that returns what it is told to (a fixed list) is checked
  struct fixed {
    dcpp::bucket_list list;
    dcpp::bucket_list buckets(const dcpp::problem&, std::span<const double>) const { return list; }
  };
  dcpp::bucket_list all(1);
  for (std::int32_t s = 0; s < 77; ++s)
    all[0].push_back(s);
  CHECK(dcpp::make_buckets(fixed{all}, pr, e) == all);
  const auto fails_with = [&](dcpp::bucket_list list, const std::string& message,
                              std::int64_t sample) {
    try {
      (void)dcpp::make_buckets(fixed{std::move(list)}, pr, e);
      FAIL("no error");
    } catch (const dcpp::error& err) {
      CHECK(std::string(err.what()) == message);
      CHECK(err.why().code == dcpp::status_code::invalid_plan);
      CHECK(err.why().sample == sample);
    }
  };
  dcpp::bucket_list lost = all;
  lost[0].erase(lost[0].begin() + 40);
  fails_with(lost, "bucketing policy lost sample 40", 40);
  dcpp::bucket_list twice = all;
  twice.push_back({12});
  fails_with(twice, "bucketing policy returned sample 12 twice", 12);
  dcpp::bucket_list outside = all;
  outside[0].push_back(77);
  fails_with(outside, "bucketing policy returned sample 77 outside the batch", 77);
  outside[0].back() = -3;
  fails_with(outside, "bucketing policy returned sample -3 outside the batch", -3);
}
