// The samples a micro-batch-after-micro-batch policy has not placed yet, and the longest length
// that fits a room: what the baselines skip samples that cannot fit with.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "dcpp/planner/bucketing.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp::detail {

//! Flattens buckets into one processing order.
inline std::vector<std::int32_t> flatten(const bucket_list& buckets) {
  std::vector<std::int32_t> out;
  for (const auto& b : buckets)
    out.insert(out.end(), b.begin(), b.end());
  return out;
}

//! The samples a micro-batch-after-micro-batch policy has not placed yet, in its processing
//! order, with a search for the next one no longer than a given length. Such a policy offers
//! every remaining sample to each micro-batch in order; a sample that cannot be placed leaves
//! the micro-batch as it was, so skipping samples that cannot fit changes nothing. The search
//! makes the skip cheap: a min-tree over blocks of `block` positions (a block's least remaining
//! length) finds the next candidate in O(block + log n), where offering every sample to every
//! micro-batch cost samples x micro-batches.
class remaining_samples {
public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  remaining_samples(const problem& pr, std::vector<std::int32_t> order)
      : order_(std::move(order)), length_(order_.size()), left_(order_.size()) {
    for (std::size_t k = 0; k < order_.size(); ++k)
      length_[k] = pr.lengths[static_cast<std::size_t>(order_[k])];
    const std::size_t blocks = (order_.size() + block - 1) / block;
    leaves_ = std::bit_ceil(std::max<std::size_t>(blocks, 1));
    tree_.assign(2 * leaves_, placed);
    for (std::size_t b = 0; b < blocks; ++b)
      tree_[leaves_ + b] = block_min(b);
    for (std::size_t n = leaves_ - 1; n >= 1; --n)
      tree_[n] = std::min(tree_[2 * n], tree_[2 * n + 1]);
  }

  [[nodiscard]] bool empty() const noexcept { return left_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return order_.size(); }
  [[nodiscard]] std::int32_t sample(std::size_t k) const { return order_[k]; }
  [[nodiscard]] bool taken(std::size_t k) const { return length_[k] == placed; }

  //! The first remaining position at or after `from` whose length is at most `limit`; npos if
  //! none.
  [[nodiscard]] std::size_t next(std::size_t from, std::int64_t limit) const {
    if (from >= order_.size())
      return npos;
    limit = std::min(limit, placed - 1);
    std::size_t b = from / block;
    if (const std::size_t k = scan(b, from, limit); k != npos)
      return k;
    // the next block after b holding a length <= limit: up from b's leaf while it is a right
    // child or its right sibling has none, then down to the leftmost such leaf
    std::size_t n = leaves_ + b;
    while (true) {
      if (n == 1)
        return npos;
      if (n % 2 == 0 && tree_[n + 1] <= limit) {
        n = n + 1;
        break;
      }
      n /= 2;
    }
    while (n < leaves_)
      n = tree_[2 * n] <= limit ? 2 * n : 2 * n + 1;
    b = n - leaves_;
    return scan(b, b * block, limit);
  }

  //! Marks position `k` placed.
  void remove(std::size_t k) {
    DCPP_EXPECTS(k < order_.size() && length_[k] != placed);
    length_[k] = placed;
    --left_;
    std::size_t n = leaves_ + k / block;
    tree_[n] = block_min(k / block);
    for (n /= 2; n >= 1; n /= 2)
      tree_[n] = std::min(tree_[2 * n], tree_[2 * n + 1]);
  }

private:
  static constexpr std::size_t block = 32;
  static constexpr std::int64_t placed = std::numeric_limits<std::int64_t>::max();

  [[nodiscard]] std::int64_t block_min(std::size_t b) const {
    std::int64_t m = placed;
    for (std::size_t k = b * block; k < std::min(order_.size(), (b + 1) * block); ++k)
      m = std::min(m, length_[k]);
    return m;
  }
  [[nodiscard]] std::size_t scan(std::size_t b, std::size_t from, std::int64_t limit) const {
    for (std::size_t k = from; k < std::min(order_.size(), (b + 1) * block); ++k)
      if (length_[k] <= limit) // placed positions hold the largest value: never <= a limit
        return k;              // below it
    return npos;
  }

  std::vector<std::int32_t> order_;
  std::vector<std::int64_t> length_; // `placed` once placed
  std::size_t left_;
  std::size_t leaves_ = 1;
  std::vector<std::int64_t> tree_; // tree_[leaves_ + b]: block b's least remaining length
};

//! The longest sample of `length` tokens or fewer that fits `room` free tokens per rank on `cp`
//! ranks is the last length of `room / (2 unit)` whole padding chunks of 2 cp unit: a sample
//! longer than this puts more than `room` tokens on each rank (`tokens_per_rank`). -1 when
//! nothing fits (a negative room, or no ranks).
inline std::int64_t longest_fitting(const plan_options& o, std::int64_t room, std::int32_t cp) {
  if (room < 0 || cp < 1)
    return -1;
  return room / (2 * o.padding_unit) * 2 * o.padding_unit * cp;
}

} // namespace dcpp::detail
