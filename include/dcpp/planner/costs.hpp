// The estimator's costs as the planner reads them: the optional per-problem table (filled once
// per distinct length and legal CP size) and `sample_cost`, which reads it or asks the
// estimator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp {

//! Groups the samples by length (`pr.cost_row`, `pr.row_sample`: rows numbered by first
//! occurrence) and fills `pr.costs` with `estimator.cost(length, cp)` for every row and every
//! legal size at or above its smallest (the sizes any plan may give it), so that planning and
//! evaluation call the estimator once per (length, size). The table only while it stays small
//! enough to live in cache (`max_entries` rows x sizes; measured: 4,096 SFT samples on 64 ranks
//! plan faster with it, and a 65,536 x 11 per-sample table made 65,536 samples on 1,024 ranks
//! slower than calling the transformer model): otherwise `sample_cost` calls the estimator, and
//! the rows still let work per length be done once per length (`cost_rows`).
//! An estimator may offer `costs(length, sizes, out)` filling a row at once; it must give the
//! bits of `cost` (transformer_cost does, with a fifth of the divisions).
template <workload_estimator Estimator>
void tabulate_costs(problem& pr, const Estimator& estimator, std::size_t max_entries = 1 << 17) {
  const std::size_t sizes_count = pr.cp_sizes.size();
  pr.costs.clear();
  pr.cost_row.clear();
  pr.row_sample.clear();
  if (sizes_count == 0 || pr.size() == 0)
    return;
  // rows by first occurrence of each length: a row per length value when the lengths are short
  // enough for that array to be no larger than a hash table of the samples (typical: lengths up
  // to 32K for 4,096 samples), else open addressing on the length, kept in the slot
  std::size_t slots = 16;
  while (slots < 2 * pr.size())
    slots *= 2;
  struct slot {
    std::int64_t length = -1;
    std::int32_t row = -1;
  };
  std::vector<std::int32_t> row_sample; // the first sample of each row's length
  std::vector<std::int32_t> rows(pr.size());
  const std::int64_t longest = *std::max_element(pr.lengths.begin(), pr.lengths.end());
  if (static_cast<std::uint64_t>(longest) < slots * sizeof(slot) / sizeof(std::int32_t)) {
    std::vector<std::int32_t> row_of(static_cast<std::size_t>(longest) + 1, -1);
    for (std::size_t s = 0; s < pr.size(); ++s) {
      DCPP_EXPECTS(pr.lengths[s] >= 0);
      std::int32_t& row = row_of[static_cast<std::size_t>(pr.lengths[s])];
      if (row < 0) {
        row = static_cast<std::int32_t>(row_sample.size());
        row_sample.push_back(static_cast<std::int32_t>(s));
      }
      rows[s] = row;
    }
  } else {
    std::vector<slot> table(slots);
    for (std::size_t s = 0; s < pr.size(); ++s) {
      const std::int64_t length = pr.lengths[s];
      const auto key = static_cast<std::uint64_t>(length);
      std::size_t h = static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> 20) & (slots - 1);
      while (table[h].row >= 0 && table[h].length != length)
        h = (h + 1) & (slots - 1);
      if (table[h].row < 0) {
        table[h] = {length, static_cast<std::int32_t>(row_sample.size())};
        row_sample.push_back(static_cast<std::int32_t>(s));
      }
      rows[s] = table[h].row;
    }
  }
  pr.cost_row = std::move(rows);
  pr.row_sample = std::move(row_sample);
  if (pr.row_sample.size() * sizes_count > max_entries)
    return; // too large to pay: rows without a table
  pr.costs.assign(pr.row_sample.size() * sizes_count, std::numeric_limits<double>::quiet_NaN());
  const std::span<const std::int32_t> sizes(pr.cp_sizes);
  for (std::size_t r = 0; r < pr.row_sample.size(); ++r) {
    const auto s = static_cast<std::size_t>(pr.row_sample[r]);
    // the sizes at or above the smallest: from its size index on (sizes ascend)
    const auto first =
        static_cast<std::size_t>(pr.size_index_of_cp[static_cast<std::size_t>(pr.min_cp_of[s])]);
    double* row = pr.costs.data() + r * sizes_count;
    if constexpr (requires(std::span<double> out) { estimator.costs(pr.lengths[s], sizes, out); }) {
      estimator.costs(pr.lengths[s], sizes.subspan(first),
                      std::span<double>(row + first, sizes_count - first));
    } else {
      for (std::size_t l = first; l < sizes_count; ++l)
        row[l] = static_cast<double>(estimator.cost(pr.lengths[s], pr.cp_sizes[l]));
    }
  }
}

namespace detail {
//! The column of `cp` in the problem's cost table, -1 without a table or for a size that is not
//! legal (a plan under validation).
inline std::int32_t cost_column(const problem& pr, std::int32_t cp) noexcept {
  const auto ucp = static_cast<std::size_t>(cp);
  return pr.costs.empty() || ucp >= pr.size_index_of_cp.size() ? -1 : pr.size_index_of_cp[ucp];
}
//! `sample_cost` with `column = cost_column(pr, cp)` given (loops over one size look it up once).
template <workload_estimator Estimator>
double sample_cost_in(const problem& pr, const Estimator& estimator, std::size_t s, std::int32_t cp,
                      std::int32_t column) {
  if (column < 0 || cp < pr.min_cp_of[s]) // not tabulated: the estimator
    return static_cast<double>(estimator.cost(pr.lengths[s], cp));
  return pr.cost_row_of(s)[column];
}
} // namespace detail

//! `estimator.cost(length of sample s, cp)`, from the problem's table when it holds the entry.
template <workload_estimator Estimator>
inline double sample_cost(const problem& pr, const Estimator& estimator, std::size_t s,
                          std::int32_t cp) {
  return detail::sample_cost_in(pr, estimator, s, cp, detail::cost_column(pr, cp));
}

} // namespace dcpp
