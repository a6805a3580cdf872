// The bucketing concept: the order, in classes, in which packing policies consider samples.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <numeric>
#include <span>
#include <type_traits>
#include <vector>

#include "dcpp/planner/options.hpp"
#include "dcpp/planner/sort.hpp"

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

//! The buckets of one batch as the planner hands them to a packing policy: made by the
//! bucketing policy (and checked) the first time anyone reads them, so that a policy which does
//! not look at them in this batch (`balanced` past its megatron limit) does not pay for them.
//! Converts to `const bucket_list&`, so a policy whose `pack` takes a `bucket_list` receives
//! the made list; it is also a read-only range of buckets. Holds a reference to its maker (or
//! to a ready list), which must outlive it; not copyable, not thread-safe.
class bucket_source {
public:
  //! Buckets made by `make()` on first use.
  template <class Make>
  requires std::same_as<std::invoke_result_t<const Make&>, bucket_list>
  explicit bucket_source(const Make& make)
      : maker_(&make), call_([](const void* m) { return (*static_cast<const Make*>(m))(); }) {}
  //! Buckets already made.
  explicit bucket_source(const bucket_list& ready) : ready_(&ready) {}
  // a temporary maker or list would be gone before the buckets are read
  template <class Make>
  requires(!std::is_lvalue_reference_v<Make>) explicit bucket_source(Make&&) = delete;
  bucket_source(const bucket_source&) = delete;
  bucket_source& operator=(const bucket_source&) = delete;

  [[nodiscard]] const bucket_list& get() const {
    if (ready_ == nullptr) {
      made_ = call_(maker_);
      ready_ = &made_;
    }
    return *ready_;
  }
  operator const bucket_list&() const { return get(); } // NOLINT: implicit by design
  //! Whether the buckets have been made (a ready list counts as made).
  [[nodiscard]] bool made() const noexcept { return ready_ != nullptr; }

  [[nodiscard]] auto begin() const { return get().begin(); }
  [[nodiscard]] auto end() const { return get().end(); }
  [[nodiscard]] std::size_t size() const { return get().size(); }
  [[nodiscard]] bool empty() const { return get().empty(); }
  [[nodiscard]] const std::vector<std::int32_t>& operator[](std::size_t i) const {
    return get()[i];
  }

private:
  const void* maker_ = nullptr;
  bucket_list (*call_)(const void*) = nullptr;
  mutable bucket_list made_;
  mutable const bucket_list* ready_ = nullptr;
};

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
    // the classes by counting (a sample's smallest size is a legal one: its level), then each
    // class by length alone, a one-word key
    bucket_list by_level(p.cp_sizes.size());
    for (std::size_t i = 0; i < p.size(); ++i)
      by_level[static_cast<std::size_t>(p.level_of_cp[static_cast<std::size_t>(p.min_cp_of[i])])]
          .push_back(static_cast<std::int32_t>(i));
    bucket_list out;
    for (std::size_t l = by_level.size(); l-- > 0;)
      if (!by_level[l].empty()) {
        sort_ids_by_key(by_level[l],
                        [&](std::int32_t a) { return -p.lengths[static_cast<std::size_t>(a)]; });
        out.push_back(std::move(by_level[l]));
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
