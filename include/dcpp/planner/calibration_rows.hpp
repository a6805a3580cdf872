// The rows a calibration is fitted to, what the fit reports, and the rows' own checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"

namespace dcpp {

//! One measurement: a sample of `length` tokens on a group of `cp` ranks took `seconds` per rank
//! (forward and backward); or, with `microbatch` set, one micro-batch's fixed cost took `seconds`
//! (`length` and `cp` unused).
struct calibration_row {
  std::int64_t length = 0;
  std::int32_t cp = 1;
  double seconds = 0;
  bool microbatch = false;
};

//! How well a fit matches its rows: relative residuals `(fitted - measured) / measured`.
struct calibration_report {
  std::size_t rows = 0;         //!< rows fitted (sample and micro-batch rows)
  std::size_t coefficients = 0; //!< coefficients the rows determine (the others are 0)
  double rms_relative = 0;      //!< root mean square of the relative residuals
  double max_relative = 0;      //!< the largest |relative residual|...
  std::size_t worst_row = 0;    //!< ...and its row (1-based, in input order)
  std::int64_t shortest = 0;    //!< the shortest and longest measured sample lengths
  std::int64_t longest = 0;
  //! Where the fitted formula falls as the length grows, `cost` prices by its running maximum
  //! (the least non-decreasing cost above it): the largest relative lift that gives at a
  //! measured size over the measured lengths (0: the formula rises everywhere there)...
  double envelope_lift = 0;
  std::int64_t lift_length = 0; //!< ...at this length...
  std::int32_t lift_cp = 0;     //!< ...on this many ranks
  //! The form of the ring's part the fit kept: "hinge" or "exposure" (calibrated_cost's comment).
  std::string_view form = "hinge";
  //! The residuals' standard error: rms x sqrt(rows / (rows - coefficients)), the rms counted
  //! against the rows the coefficients leave free; infinite where none are.
  [[nodiscard]] double standard_error() const noexcept {
    if (rows <= coefficients)
      return std::numeric_limits<double>::infinity();
    return rms_relative *
           std::sqrt(static_cast<double>(rows) / static_cast<double>(rows - coefficients));
  }
};

namespace detail {

//! Measured times that fall by more than `calibration_measured_fall` as the length grows on the
//! same number of ranks describe no cluster (swapped columns or units, say): refused, naming both
//! rows. Smaller falls are left to the fit: timing noise, or a kink the envelope covers.
inline constexpr double calibration_measured_fall = 0.25;
inline void check_calibration_growth(std::span<const calibration_row> rows) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].microbatch)
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return std::pair(rows[x].cp, rows[x].length) < std::pair(rows[y].cp, rows[y].length);
  });
  std::size_t slowest = order.front(); // the slowest shorter row on the same size
  for (const std::size_t i : order) {
    const auto& r = rows[i];
    const auto& s = rows[slowest];
    if (s.cp != r.cp || r.seconds > s.seconds) {
      slowest = i;
      continue;
    }
    if (r.length > s.length && r.seconds < s.seconds * (1 - calibration_measured_fall))
      throw error(status_code::parse_error,
                  fmt::format("calibration row {}: (length = {}, cp = {}) measured {} s, {:.0f}% "
                              "below the {} s of the shorter length {} (row {}); a longer "
                              "sample takes longer (check the rows' units and columns)",
                              i + 1, r.length, r.cp, r.seconds, 100 * (1 - r.seconds / s.seconds),
                              s.seconds, s.length, slowest + 1));
  }
}

//! The rows' own checks: positive finite times, positive lengths and sizes, a sample row.
inline void check_calibration_rows(std::span<const calibration_row> rows,
                                   std::int32_t gpus_per_node) {
  if (gpus_per_node < 1)
    throw error(status_code::invalid_option,
                fmt::format("calibration: gpus_per_node = {} must be >= 1", gpus_per_node));
  std::size_t sample_rows = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (!(r.seconds > 0) || !std::isfinite(r.seconds))
      throw error(status_code::parse_error,
                  fmt::format("calibration row {}: seconds = {} must be a finite time > 0", i + 1,
                              r.seconds));
    if (r.microbatch)
      continue;
    ++sample_rows;
    if (r.length <= 0 || r.cp <= 0)
      throw error(status_code::parse_error,
                  fmt::format("calibration row {}: (length = {}, cp = {}) must have length > 0 "
                              "and cp > 0",
                              i + 1, r.length, r.cp));
  }
  if (sample_rows == 0)
    throw error(status_code::parse_error,
                "calibration: no (length, cp, seconds) row; micro-batch rows alone price no "
                "sample");
  check_calibration_growth(rows);
}

} // namespace detail

} // namespace dcpp
