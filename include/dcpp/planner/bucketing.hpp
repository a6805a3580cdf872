// The bucketing concept: the order, in classes, in which packing policies consider samples.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <numeric>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/util/sort.hpp"

namespace dcpp {

//! Ordered classes of sample ids. Packing policies take samples bucket by bucket, in order,
//! and inside a bucket in the given order. Every sample is in exactly one bucket.
using bucket_list = std::vector<std::vector<std::int32_t>>;

//! A bucketing policy: `buckets(problem, work)` where `work[i]` is sample i's cost on its
//! smallest legal CP group.
template <class B>
concept bucketing_policy = std::copyable<B> &&
    requires(const B& b, const problem& p, std::span<const double> work) {
  { b.buckets(p, work) } -> std::same_as<bucket_list>;
};

//! The buckets of `bucketing` for the batch, checked: every sample exactly once. A bucketing
//! policy that loses a sample, repeats one or names one outside the batch is an error that
//! names the sample (status `invalid_plan`). `work[i]` is sample i's cost on its smallest size.
template <bucketing_policy Bucketing, workload_estimator Estimator>
[[nodiscard]] bucket_list make_buckets(const Bucketing& bucketing, const problem& pr,
                                       const Estimator& estimator) {
  const std::size_t n = pr.size();
  std::vector<double> work(n);
  for (std::size_t i = 0; i < n; ++i)
    work[i] = sample_cost(pr, estimator, i, pr.min_cp_of[i]);
  bucket_list buckets = bucketing.buckets(pr, work);
  std::vector<char> seen(n, 0);
  std::size_t count = 0;
  for (const auto& b : buckets)
    for (const auto s : b) {
      const bool outside = s < 0 || static_cast<std::size_t>(s) >= n;
      if (outside || seen[static_cast<std::size_t>(s)])
        throw error(status_code::invalid_plan,
                    fmt::format("bucketing policy returned sample {} {}", s,
                                outside ? "outside the batch" : "twice"),
                    s);
      seen[static_cast<std::size_t>(s)] = 1;
      ++count;
    }
  if (count != n)
    for (std::size_t s = 0; s < n; ++s)
      if (!seen[s])
        throw error(status_code::invalid_plan, fmt::format("bucketing policy lost sample {}", s),
                    static_cast<std::int64_t>(s));
  return buckets;
}

namespace detail {
//! Sample ids sorted by descending work, then descending length, then ascending id.
inline std::vector<std::int32_t> by_descending_work(const problem& p,
                                                    std::span<const double> work) {
  std::vector<std::int32_t> ids(p.size());
  std::iota(ids.begin(), ids.end(), 0);
  // descending work, then descending length, then ascending id
  sort_ids_by_key(ids, [&](std::int32_t a) {
    const auto u = static_cast<std::size_t>(a);
    return std::pair(-work[u], -p.lengths[u]);
  });
  return ids;
}
} // namespace detail

//! One bucket per smallest CP size, largest CP first; inside, longest first (ties: lower id).
//! The default: groups that need many ranks are placed while the world still has room.
struct by_cp_size {
  [[nodiscard]] bucket_list buckets(const problem& p, std::span<const double> work) const {
    (void)work;
    // the classes by counting (a sample's smallest size is a legal one: its size index), then each
    // class by length alone, a one-word key
    bucket_list by_size(p.cp_sizes.size());
    for (std::size_t i = 0; i < p.size(); ++i)
      by_size[static_cast<std::size_t>(
                  p.size_index_of_cp[static_cast<std::size_t>(p.min_cp_of[i])])]
          .push_back(static_cast<std::int32_t>(i));
    bucket_list out;
    for (std::size_t l = by_size.size(); l-- > 0;)
      if (!by_size[l].empty()) {
        sort_ids_by_key(by_size[l],
                        [&](std::int32_t a) { return -p.lengths[static_cast<std::size_t>(a)]; });
        out.push_back(std::move(by_size[l]));
      }
    return out;
  }
};
static_assert(bucketing_policy<by_cp_size>);

//! No classes: one bucket, heaviest first.
struct single_bucket {
  [[nodiscard]] bucket_list buckets(const problem& p, std::span<const double> work) const {
    return {detail::by_descending_work(p, work)};
  }
};
static_assert(bucketing_policy<single_bucket>);

//! `count` buckets of (nearly) equal size by descending work.
struct by_work_quantile {
  std::int32_t count = 4;
  [[nodiscard]] bucket_list buckets(const problem& p, std::span<const double> work) const {
    const auto ids = detail::by_descending_work(p, work);
    const std::size_t k = std::max<std::size_t>(1, static_cast<std::size_t>(std::max(1, count)));
    bucket_list out;
    for (std::size_t b = 0; b < k; ++b) {
      const std::size_t lo = ids.size() * b / k;
      const std::size_t hi = ids.size() * (b + 1) / k;
      if (hi > lo)
        out.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(lo),
                         ids.begin() + static_cast<std::ptrdiff_t>(hi));
    }
    return out;
  }
};
static_assert(bucketing_policy<by_work_quantile>);

} // namespace dcpp
