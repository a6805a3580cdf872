// The least-area lower bound on the step time (docs/bounds.md section 1), the fewest
// micro-batches any plan needs, and the fractional knapsack of least areas by least rank-tokens
// that the budget-aware terms fill rounds with.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "dcpp/error.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp {

//! Fewest micro-batches any plan needs: total padded tokens (each sample on the legal size that
//! pads it least: its smallest, but where a larger contiguous size pads less) over the world's
//! token capacity, rounded up to the micro-batch multiple.
inline std::int32_t min_microbatches(const problem& pr) {
  return detail::fewest_microbatches(pr);
}

namespace detail {
//! `lower_bound` with the fewest micro-batches `k_min` (= min_microbatches(pr)) given.
template <workload_estimator Estimator>
double lower_bound(const problem& pr, const Estimator& estimator, std::int32_t k_min) {
  return least_work_of(pr, estimator).bound() + k_min * microbatch_overhead(pr, estimator);
}
} // namespace detail

//! `LB = max( sum_i min_c c*cost(L_i,c) / N , max_i min_c cost(L_i,c) )` over the feasible c,
//! plus the micro-batch overhead (`microbatch_overhead(pr, estimator)`) for the fewest
//! micro-batches any plan needs.
template <workload_estimator Estimator>
double lower_bound(const problem& pr, const Estimator& estimator) {
  return detail::lower_bound(pr, estimator, min_microbatches(pr));
}

namespace detail {
//! The fractional knapsack of samples' least areas by their least rank-tokens, for
//! `budget_lower_bound`: `carried(room)` is the most least area samples of at most `room`
//! rank-tokens in all can carry (the densest by area per rank-token first, the last in part).
class least_area_knapsack {
public:
  struct item {
    double density; // least area per least rank-tokens
    double tokens;  // least rank-tokens
    std::size_t id;
  };
  //! The item of sample `id`, of least area `area` over `tokens` least rank-tokens.
  [[nodiscard]] static item item_of(double area, double tokens, std::size_t id) noexcept {
    return {area / tokens, tokens, id};
  }
  //! The knapsack's order: the densest first, then by id.
  [[nodiscard]] static bool before(const item& a, const item& b) noexcept {
    return a.density != b.density ? a.density > b.density : a.id < b.id;
  }
  explicit least_area_knapsack(std::vector<item> items) : least_area_knapsack(sort(items), 0) {}
  //! `items` already in the knapsack's order (`before`).
  least_area_knapsack(std::vector<item>&& sorted, int) : items_(std::move(sorted)) {
    DCPP_EXPECTS(std::is_sorted(items_.begin(), items_.end(), before));
    tokens_before_.assign(items_.size() + 1, 0);
    area_before_.assign(items_.size() + 1, 0);
    for (std::size_t s = 0; s < items_.size(); ++s) {
      tokens_before_[s + 1] = tokens_before_[s] + items_[s].tokens;
      area_before_[s + 1] = area_before_[s] + items_[s].density * items_[s].tokens;
    }
  }
  [[nodiscard]] double carried(double room) const {
    if (room <= 0)
      return 0.0;
    const auto s = static_cast<std::size_t>(
        std::upper_bound(tokens_before_.begin(), tokens_before_.end(), room) -
        tokens_before_.begin());
    if (s > items_.size())
      return area_before_.back();
    return area_before_[s - 1] + items_[s - 1].density * (room - tokens_before_[s - 1]);
  }

private:
  static std::vector<item>&& sort(std::vector<item>& items) {
    std::sort(items.begin(), items.end(), before);
    return std::move(items);
  }
  std::vector<item> items_;
  std::vector<double> tokens_before_; // prefix sums in knapsack order
  std::vector<double> area_before_;
};

} // namespace detail
} // namespace dcpp
