// The estimator's costs as the planner reads them: the optional per-problem table (filled once
// per distinct length and legal CP size) and `sample_cost`, which reads it or asks the
// estimator.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dcpp/core/math.hpp"
#include "dcpp/error.hpp"
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
void tabulate_costs(problem& pr, const Estimator& estimator, std::size_t max_entries = 1 << 17);

namespace detail {
//! The samples grouped by length: `row[s]` the row of sample s, `row_sample[r]` the first sample
//! of row r's length (rows by first occurrence).
struct length_rows {
  std::vector<std::int32_t> row;
  std::vector<std::int32_t> row_sample;
};
[[nodiscard]] inline length_rows group_by_length(const problem& pr) {
  length_rows out;
  if (pr.size() == 0)
    return out;
  // a row per length value when the lengths are short enough for that array to be no larger
  // than a hash table of the samples (typical: lengths up to 32K for 4,096 samples), else open
  // addressing on the length, kept in the slot
  std::size_t slots = 16;
  while (slots < 2 * pr.size())
    slots *= 2;
  struct slot {
    std::int64_t length = -1;
    std::int32_t row = -1;
  };
  std::vector<std::int32_t>& row_sample = out.row_sample;
  std::vector<std::int32_t>& rows = out.row;
  rows.resize(pr.size());
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
  return out;
}

template <workload_estimator Estimator>
void tabulate_rows(problem& pr, const Estimator& estimator, std::size_t max_entries) {
  const std::size_t sizes_count = pr.cp_sizes.size();
  pr.costs.clear();
  pr.cost_row.clear();
  pr.row_sample.clear();
  if (sizes_count == 0 || pr.size() == 0)
    return;
  length_rows grouped = group_by_length(pr);
  pr.cost_row = std::move(grouped.row);
  pr.row_sample = std::move(grouped.row_sample);
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

//! The least work of a batch per rank, the two terms of DESIGN.md's lower bound: the samples'
//! least rank areas `sum_i min_c c x cost(L_i, c)` over the world, and the longest least time
//! `max_i min_c cost(L_i, c)`, over the legal sizes at or above each sample's smallest (per
//! length once when the problem groups samples by length; sums in sample order).
struct least_work {
  double area_per_rank = 0;
  double longest = 0;
  //! The samples' areas summed over every legal size at or above each one's smallest: a bound
  //! on every load and on the sum of a plan's round times (0 where only the two terms were kept).
  double all_areas = 0;
  [[nodiscard]] double bound() const noexcept { return std::max(area_per_rank, longest); }
};

namespace detail {
//! Throws `invalid_cost` for the first cost of sample `s` (at the legal sizes at or above its
//! smallest) outside the estimator contract (NaN, infinite, negative), which any plan would
//! compare, sum or divide by; or, all of them within it, for their areas (cost x size) summing
//! past a double. Called when the sums of `compute_least_work` show either (the loops stay free
//! of checks).
template <workload_estimator Estimator>
[[noreturn]] void throw_bad_cost(const problem& pr, const Estimator& estimator, std::size_t s) {
  const auto id = static_cast<std::int64_t>(s);
  for (const std::int32_t cp : pr.cp_sizes) {
    if (cp < pr.min_cp_of[s])
      continue;
    // the estimator's own value, which is the table's (reading it through `sample_cost` here
    // kept GCC from inlining that into the loops that call this)
    const auto cost = static_cast<double>(estimator.cost(pr.lengths[s], cp));
    if (!(cost >= 0 && cost <= std::numeric_limits<double>::max()))
      throw error(status_code::invalid_cost,
                  fmt::format("estimator: cost({}, {}) = {} for sample {}; a cost must be finite "
                              "and >= 0",
                              pr.lengths[s], cp, cost, s),
                  id);
  }
  throw error(status_code::invalid_cost,
              fmt::format("estimator: the costs overflow: the areas (cost x size) of sample {} "
                          "(length {}) over its legal sizes sum to inf; loads and step times "
                          "must stay finite",
                          s, pr.lengths[s]),
              id);
}

//! The least work, and the check that every cost a plan can read is within the estimator
//! contract: every length at every legal size at or above its smallest is priced here (the same
//! entries the table holds), and the samples' areas (cost x size) summed over those sizes must be
//! a finite number, which bounds every load and step time a plan can reach.
template <workload_estimator Estimator>
least_work compute_least_work(const problem& pr, const Estimator& estimator) {
  const bool grouped = !pr.cost_row.empty();
  const std::size_t rows = grouped ? pr.row_sample.size() : pr.size();
  std::vector<double> row_area(rows);
  std::vector<double> row_all(rows); // the areas over every legal size
  double longest = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto first = grouped ? static_cast<std::size_t>(pr.row_sample[r]) : r;
    double best_area = std::numeric_limits<double>::infinity();
    double best_time = std::numeric_limits<double>::infinity();
    double all_areas = 0; // NaN or inf once a cost is
    const auto price = [&](double t, std::int32_t cp) {
      best_area = std::min(best_area, t * cp);
      best_time = std::min(best_time, t);
      all_areas += t * cp;
    };
    if (const double* row = pr.cost_row_of(first)) {
      // the table's row from the smallest size's column on (the entries `sample_cost` reads)
      const auto column = static_cast<std::size_t>(
          pr.size_index_of_cp[static_cast<std::size_t>(pr.min_cp_of[first])]);
      for (std::size_t l = column; l < pr.cp_sizes.size(); ++l)
        price(row[l], pr.cp_sizes[l]);
    } else {
      for (const std::int32_t cp : pr.cp_sizes)
        if (cp >= pr.min_cp_of[first])
          price(static_cast<double>(estimator.cost(pr.lengths[first], cp)), cp);
    }
    if (!(best_time >= 0 && all_areas <= std::numeric_limits<double>::max())) [[unlikely]]
      throw_bad_cost(pr, estimator, first);
    row_area[r] = best_area;
    row_all[r] = all_areas;
    longest = std::max(longest, best_time);
  }
  double area = 0;
  double all = 0;
  for (std::size_t s = 0; s < pr.size(); ++s) {
    const std::size_t r = grouped ? static_cast<std::size_t>(pr.cost_row[s]) : s;
    area += row_area[r];
    all += row_all[r];
  }
  if (!(all <= std::numeric_limits<double>::max()))
    throw error(status_code::invalid_cost,
                fmt::format("estimator: the costs overflow: the {} samples' areas (cost x size) "
                            "over their legal sizes sum to {}; loads and step times must stay "
                            "finite",
                            pr.size(), all));
  return {area / pr.options.world_size, longest, all};
}
} // namespace detail

//! The least work of `pr` under `estimator`: the value `tabulate_costs` kept when it ran (for the
//! same estimator, as its table), else worked out here (a pass over every length and legal
//! size, costly on contiguous worlds of many sizes).
template <workload_estimator Estimator>
least_work least_work_of(const problem& pr, const Estimator& estimator) {
  if (!std::isnan(pr.least_area_per_rank) && !std::isnan(pr.least_longest))
    return {pr.least_area_per_rank, pr.least_longest};
  return detail::compute_least_work(pr, estimator);
}

//! The share of a mean micro-batch's work that one micro-batch costs when neither the options
//! nor the estimator say (`length^2/cp`, a calibration without micro-batch rows): 1%, a
//! few times what the h100 preset's 5 ms are of a micro-batch of 16K tokens per rank of an 8B
//! model (about 1.3 s), so an extra micro-batch is taken only when it saves clearly more.
inline constexpr double default_microbatch_overhead_share = 0.01;

namespace detail {
//! Fewest micro-batches any plan needs (evaluate.hpp's `min_microbatches`, which calls this):
//! every sample's least rank-tokens over the world's capacity (`problem::least_rank_tokens`,
//! worked out here where a problem was not made by `make_problem`).
inline std::int32_t fewest_microbatches(const problem& pr) {
  const std::int64_t rank_tokens =
      pr.least_rank_tokens >= 0 ? pr.least_rank_tokens : least_rank_tokens_of(pr);
  const std::int64_t capacity =
      std::int64_t{pr.options.world_size} * pr.options.max_tokens_per_rank;
  const auto k =
      static_cast<std::int32_t>(std::max<std::int64_t>(1, ceil_div(rank_tokens, capacity)));
  return round_up(k, pr.options.microbatch_multiple);
}

//! The overhead from the batch's own work: the default share of the mean micro-batch at the
//! bound (the least work per rank over the fewest micro-batches).
template <workload_estimator Estimator>
double batch_overhead(const problem& pr, const Estimator& estimator) {
  return default_microbatch_overhead_share * least_work_of(pr, estimator).bound() /
         static_cast<double>(fewest_microbatches(pr));
}

//! Where the micro-batch overhead comes from: its name in messages and the code a bad value of
//! it is refused with (the option's `invalid_option`, the estimator's own `invalid_cost`).
struct overhead_source {
  std::string_view name;
  status_code code;
};
template <workload_estimator Estimator>
overhead_source overhead_source_of(const problem& pr, const Estimator& estimator) {
  if (pr.options.microbatch_overhead)
    return {"microbatch_overhead", status_code::invalid_option};
  if (estimator_overhead(estimator))
    return {"estimator: microbatch_overhead()", status_code::invalid_cost};
  return {"the default microbatch_overhead", status_code::invalid_cost};
}
} // namespace detail

//! The price of one micro-batch the planner and the evaluation use, in the estimator's unit:
//! the option `microbatch_overhead` when set (`check_options` keeps it finite and >= 0), else
//! the estimator's own (`estimator_overhead`; NaN, infinite or negative throws `invalid_cost`),
//! else `default_microbatch_overhead_share` of the batch's mean micro-batch at the bound (worked
//! out once by `tabulate_costs`, or here on a problem it never saw).
template <workload_estimator Estimator>
double microbatch_overhead(const problem& pr, const Estimator& estimator) {
  if (pr.options.microbatch_overhead)
    return *pr.options.microbatch_overhead;
  if (const auto own = estimator_overhead(estimator)) {
    if (!(*own >= 0 && *own <= std::numeric_limits<double>::max())) [[unlikely]]
      throw error(
          status_code::invalid_cost,
          fmt::format("estimator: microbatch_overhead() = {} must be finite and >= 0", *own));
    return *own;
  }
  if (!std::isnan(pr.default_overhead))
    return pr.default_overhead;
  return detail::batch_overhead(pr, estimator);
}

namespace detail {
//! Throws for a micro-batch overhead (the option's or the estimator's own) so large that a plan
//! of one micro-batch per sample (at least one, raised to the micro-batch multiple: no plan has
//! more) would take longer than the largest double with the samples' work, `all_areas` (and,
//! through `microbatch_overhead`, for the estimator's own that is NaN, infinite or negative).
//! The default share of the batch's work is within the limit.
template <workload_estimator Estimator>
void check_overhead(const problem& pr, const Estimator& estimator, double all_areas) {
  if (!pr.options.microbatch_overhead && !estimator_overhead(estimator))
    return;
  const double value = microbatch_overhead(pr, estimator);
  const std::int64_t rounds =
      round_up<std::int64_t>(std::max<std::int64_t>(1, static_cast<std::int64_t>(pr.size())),
                             pr.options.microbatch_multiple);
  // (a billionth below the quotient: the products and sums of a step time round within it)
  const double most =
      (std::numeric_limits<double>::max() - all_areas) / static_cast<double>(rounds) * (1 - 1e-9);
  if (!(value <= most)) {
    const overhead_source source = overhead_source_of(pr, estimator);
    throw error(
        source.code,
        fmt::format("{} = {} exceeds the limit {}: {} micro-batches (a sample each{}) and "
                    "the work must cost below the largest double",
                    source.name, value, most, rounds,
                    pr.options.microbatch_multiple == 1
                        ? std::string()
                        : fmt::format(", to a multiple of {}", pr.options.microbatch_multiple)));
  }
}
} // namespace detail

template <workload_estimator Estimator>
void tabulate_costs(problem& pr, const Estimator& estimator, std::size_t max_entries) {
  detail::tabulate_rows(pr, estimator, max_entries);
  pr.default_overhead = std::numeric_limits<double>::quiet_NaN();
  pr.least_area_per_rank = std::numeric_limits<double>::quiet_NaN();
  pr.least_longest = std::numeric_limits<double>::quiet_NaN();
  if (pr.size() == 0 || pr.cp_sizes.empty())
    return;
  const least_work w = detail::compute_least_work(pr, estimator);
  pr.least_area_per_rank = w.area_per_rank;
  pr.least_longest = w.longest;
  detail::check_overhead(pr, estimator, w.all_areas);
  if (!pr.options.microbatch_overhead && !estimator_overhead(estimator))
    pr.default_overhead = detail::batch_overhead(pr, estimator); // reads the least work kept
}

} // namespace dcpp
