// The costs a planning algorithm reads, through one view whether or not the problem holds a cost
// table: samples of one length share a row (the rows `tabulate_costs` made, with or without the
// table itself; on a problem it never saw, every sample is a row of its own), so each algorithm
// has one code path that works per row.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp::detail {

//! Read-only view of a problem's costs and token counts (the balanced portfolio and the lower
//! bound read costs through it).
//! * Rows: `rows()` of them, `row_of(s)` the row of sample s, `first_sample(r)` the first
//!   sample of row r (rows are numbered by first occurrence, so first samples ascend);
//! * `row_cost(r, cp)`: the estimator's cost of row r's length at a size at or above its
//!   smallest (the table entry, or the estimator: the same bits);
//! * `cost(s, cp)`, `tokens(s, cp)`: per sample, any legal size.
template <workload_estimator Estimator>
class cost_rows {
public:
  cost_rows(const problem& pr, const Estimator& estimator)
      : pr_(pr), estimator_(estimator), grouped_(!pr.cost_row.empty()), table_(!pr.costs.empty()),
        overhead_(microbatch_overhead(pr, estimator)) {}

  [[nodiscard]] const problem& batch() const noexcept { return pr_; }
  [[nodiscard]] const Estimator& estimator() const noexcept { return estimator_; }
  [[nodiscard]] const plan_options& options() const noexcept { return pr_.options; }
  [[nodiscard]] std::int32_t samples() const noexcept {
    return static_cast<std::int32_t>(pr_.size());
  }
  [[nodiscard]] std::int32_t world() const noexcept { return pr_.options.world_size; }
  [[nodiscard]] std::int64_t budget() const noexcept { return pr_.options.max_tokens_per_rank; }
  //! Number of legal CP sizes; `size_index(cp)` is a legal size's position among them.
  [[nodiscard]] std::size_t sizes() const noexcept { return pr_.cp_sizes.size(); }
  [[nodiscard]] std::size_t size_index(std::int32_t cp) const {
    const std::int32_t index = pr_.size_index_of_cp[static_cast<std::size_t>(cp)];
    DCPP_EXPECTS(index >= 0);
    return static_cast<std::size_t>(index);
  }

  [[nodiscard]] std::size_t rows() const noexcept {
    return grouped_ ? pr_.row_sample.size() : pr_.size();
  }
  [[nodiscard]] std::int32_t row_of(std::int32_t s) const noexcept {
    return grouped_ ? pr_.cost_row[static_cast<std::size_t>(s)] : s;
  }
  [[nodiscard]] std::int32_t first_sample(std::size_t row) const noexcept {
    return grouped_ ? pr_.row_sample[row] : static_cast<std::int32_t>(row);
  }
  [[nodiscard]] double row_cost(std::int32_t row, std::int32_t cp) const {
    if (const double* table = row_table(static_cast<std::size_t>(row)))
      return table[size_index(cp)];
    const auto first = static_cast<std::size_t>(first_sample(static_cast<std::size_t>(row)));
    return static_cast<double>(estimator_.cost(pr_.lengths[first], cp));
  }
  //! The same where the caller holds the row's table entries (`row_table`, nullptr without a
  //! table) and the size's index: loops over rows or sizes look each up once.
  [[nodiscard]] double row_cost(std::int32_t row, const double* table, std::size_t column,
                                std::int32_t cp) const {
    return table != nullptr ? table[column] : row_cost(row, cp);
  }

  //! Row r's entries of the cost table, indexed by size index (valid from the size index of
  //! the row's smallest size on), or nullptr without a table: loops over a row's sizes read
  //! it directly where `row_cost` would look up each size's column.
  [[nodiscard]] const double* row_table(std::size_t row) const noexcept {
    return table_ ? pr_.cost_row_at(row) : nullptr;
  }

  //! True when the rows' costs come from the table: the runs that build on a second thread
  //! read only it there, since a user's estimator need not be safe to call from two threads.
  [[nodiscard]] bool tabulated() const noexcept { return rows() > 0 && row_table(0) != nullptr; }

  [[nodiscard]] double cost(std::int32_t s, std::int32_t cp) const {
    return sample_cost(pr_, estimator_, static_cast<std::size_t>(s), cp);
  }
  [[nodiscard]] std::int64_t tokens(std::int32_t s, std::int32_t cp) const {
    return pr_.rank_tokens(static_cast<std::size_t>(s), cp);
  }
  //! The price of a micro-batch (`microbatch_overhead(problem, estimator)`).
  [[nodiscard]] double overhead() const noexcept { return overhead_; }

private:
  const problem& pr_;
  const Estimator& estimator_;
  bool grouped_; // samples grouped by length (tabulate_costs ran)
  bool table_;   // and the costs tabulated
  double overhead_;
};

} // namespace dcpp::detail
