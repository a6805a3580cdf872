// Tests for include/dcpp/planner/util/sort.hpp and include/dcpp/planner/util/node_pool.hpp.
#include "../../support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "dcpp/planner/util/node_pool.hpp"
#include "dcpp/planner/util/sort.hpp"
#include "dcpp/workload/generators.hpp"

TEST_CASE("sort_ids_by_key: the order of a stable sort by the key, ties by id") {
  dcpp::workload::rng r(3);
  for (const std::size_t n : {0U, 1U, 2U, 7U, 130U, 1021U}) {
    CAPTURE(n);
    std::vector<double> a(n);
    std::vector<std::int64_t> b(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = static_cast<double>(r.uniform_int(0, 9)) * 0.25; // many ties
      b[i] = r.uniform_int(0, 4);
    }
    std::vector<std::int32_t> ids(n), expect(n);
    std::iota(ids.begin(), ids.end(), 0);
    // shuffle the input order: the result must not depend on it
    for (std::size_t i = n; i > 1; --i)
      std::swap(ids[i - 1],
                ids[static_cast<std::size_t>(r.uniform_int(0, static_cast<std::int64_t>(i) - 1))]);
    std::iota(expect.begin(), expect.end(), 0);
    std::stable_sort(expect.begin(), expect.end(), [&](std::int32_t x, std::int32_t y) {
      const auto ux = static_cast<std::size_t>(x), uy = static_cast<std::size_t>(y);
      if (a[ux] != a[uy])
        return a[ux] > a[uy]; // descending
      return b[ux] > b[uy];
    });
    dcpp::sort_ids_by_key(ids, [&](std::int32_t id) {
      const auto u = static_cast<std::size_t>(id);
      return std::pair(-a[u], -b[u]);
    });
    CHECK(ids == expect);
  }
}

TEST_CASE("sort_ids_by_key: bucket path equals a comparison sort on awkward keys") {
  // above the bucket path's threshold: ties, signed values, -0.0 next to +0.0, wide, narrow and
  // skewed ranges, a leading field with five values (buckets of thousands, split by the next
  // fields), a constant field, ids given in ascending and in shuffled order
  dcpp::workload::rng r(11);
  for (const std::size_t n : {256U, 257U, 1000U, 4099U, 20000U}) {
    for (int shape = 0; shape < 5; ++shape) {
      CAPTURE(n);
      CAPTURE(shape);
      std::vector<double> a(n);
      std::vector<std::int64_t> b(n);
      std::vector<std::int32_t> c(n);
      for (std::size_t i = 0; i < n; ++i) {
        switch (shape) {
        case 0: // doubles of both signs, zeros of both signs
          a[i] = static_cast<double>(r.uniform_int(-3, 3)) * (r.uniform() < 0.5 ? 0.0 : 1.5);
          if (a[i] == 0.0 && r.uniform() < 0.5)
            a[i] = -0.0;
          break;
        case 1: // one binade, full mantissa noise
          a[i] = 1.0 + r.uniform();
          break;
        case 2: // wide range
          a[i] = std::ldexp(r.uniform(), static_cast<int>(r.uniform_int(-600, 600)));
          break;
        case 3: // skewed: most keys piled just above 1 (buckets split again, level after level)
          a[i] = 1.0 + std::pow(r.uniform(), 12.0);
          break;
        default: // constant
          a[i] = 2.5;
        }
        b[i] = r.uniform_int(-(std::int64_t{1} << 40), std::int64_t{1} << 40) / (shape + 1);
        c[i] = static_cast<std::int32_t>(r.uniform_int(-2, 2));
      }
      std::vector<std::int32_t> ids(n);
      std::iota(ids.begin(), ids.end(), 0);
      if (n % 2 == 1)
        for (std::size_t i = n; i > 1; --i)
          std::swap(
              ids[i - 1],
              ids[static_cast<std::size_t>(r.uniform_int(0, static_cast<std::int64_t>(i) - 1))]);
      const auto key = [&](std::int32_t id) {
        const auto u = static_cast<std::size_t>(id);
        return std::tuple(c[u], -a[u], b[u]);
      };
      std::vector<std::int32_t> expect = ids;
      std::sort(expect.begin(), expect.end(), [&](std::int32_t x, std::int32_t y) {
        return std::pair(key(x), x) < std::pair(key(y), y);
      });
      dcpp::sort_ids_by_key(ids, key);
      CHECK(ids == expect);
      // a single numeric key
      std::vector<std::int32_t> ids2(n);
      std::iota(ids2.begin(), ids2.end(), 0);
      std::vector<std::int32_t> expect2 = ids2;
      std::stable_sort(expect2.begin(), expect2.end(), [&](std::int32_t x, std::int32_t y) {
        return b[static_cast<std::size_t>(x)] < b[static_cast<std::size_t>(y)];
      });
      dcpp::sort_ids_by_key(ids2, [&](std::int32_t id) { return b[static_cast<std::size_t>(id)]; });
      CHECK(ids2 == expect2);
    }
  }
}

TEST_CASE("node_arena: sets on an arena behave like std::set under seeded inserts and erases") {
  dcpp::workload::rng r(17);
  dcpp::node_arena arena;
  using key = std::pair<double, std::int32_t>;
  std::set<key, std::less<key>, dcpp::node_allocator<key>> pooled{dcpp::node_allocator<key>(arena)};
  std::set<key> reference;
  for (int step = 0; step < 20000; ++step) {
    const key k{static_cast<double>(r.uniform_int(0, 300)),
                static_cast<std::int32_t>(r.uniform_int(0, 50))};
    if (r.uniform_int(0, 2) == 0) {
      CHECK(pooled.erase(k) == reference.erase(k));
    } else {
      CHECK(pooled.insert(k).second == reference.insert(k).second);
    }
  }
  CHECK(std::equal(pooled.begin(), pooled.end(), reference.begin(), reference.end()));
  // a vector on the arena takes arrays from operator new and still works
  std::vector<std::int64_t, dcpp::node_allocator<std::int64_t>> v{
      dcpp::node_allocator<std::int64_t>(arena)};
  for (std::int64_t i = 0; i < 1000; ++i)
    v.push_back(i * i);
  CHECK(v[999] == 999 * 999);
}
