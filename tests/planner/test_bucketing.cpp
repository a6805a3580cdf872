// Tests for include/dcpp/planner/bucketing.hpp.
#include "../support.hpp"

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "dcpp/planner/bucketing.hpp"
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

TEST_CASE("bucketing: a bucket_source makes its buckets once, on first read") {
  const auto pr = sample_problem(5, 77);
  const std::vector<double> work(pr.size(), 1.0);
  int calls = 0;
  const auto make = [&] {
    ++calls;
    return dcpp::by_cp_size{}.buckets(pr, work);
  };
  const dcpp::bucket_source source(make);
  CHECK_FALSE(source.made());
  CHECK(calls == 0);
  const dcpp::bucket_list expected = dcpp::by_cp_size{}.buckets(pr, work);
  const dcpp::bucket_list& list = source; // the conversion a bucket_list parameter uses
  CHECK(calls == 1);
  CHECK(source.made());
  CHECK(list == expected);
  // the range view reads the same list without making it again
  REQUIRE(source.size() == expected.size());
  std::size_t i = 0;
  for (const auto& bucket : source)
    CHECK(bucket == expected[i++]);
  CHECK(source[0] == expected[0]);
  CHECK_FALSE(source.empty());
  CHECK(&source.get() == &list);
  CHECK(calls == 1);

  const dcpp::bucket_source ready(expected);
  CHECK(ready.made());
  CHECK(&ready.get() == &expected);

  // it holds references: a temporary maker or list would dangle, so neither is accepted
  static_assert(std::is_constructible_v<dcpp::bucket_source, const dcpp::bucket_list&>);
  static_assert(std::is_constructible_v<dcpp::bucket_source, dcpp::bucket_list&>);
  static_assert(!std::is_constructible_v<dcpp::bucket_source, dcpp::bucket_list&&>);
  static_assert(std::is_constructible_v<dcpp::bucket_source, decltype(make)&>);
  static_assert(!std::is_constructible_v<dcpp::bucket_source, decltype(make)&&>);
}

TEST_CASE("bucketing: an error of the maker reaches the reader, and the next read retries") {
  int calls = 0;
  const auto failing = [&]() -> dcpp::bucket_list {
    if (++calls == 1)
      throw std::runtime_error("bucketing failed");
    return {{0}};
  };
  const dcpp::bucket_source source(failing);
  CHECK_THROWS_WITH_AS((void)source.get(), "bucketing failed", std::runtime_error);
  CHECK_FALSE(source.made());
  CHECK(source.get() == dcpp::bucket_list{{0}});
  CHECK(calls == 2);
}
