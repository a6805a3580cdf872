// The hinge form of calibrated_cost: its features and their least-squares fit.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"
#include "dcpp/planner/calibration_rows.hpp"
#include "dcpp/planner/util/householder.hpp"

namespace dcpp::detail {

//! The features of calibrated_cost's hinge form (its comment has the formula) and their fit.
struct hinge_layout {
  static constexpr std::size_t knot_count = 25;
  //! Knots of the ring's hinge, in tokens per rank: a factor 2^(1/4) apart from 512 to 32K.
  static constexpr std::array<double, knot_count> knots{
      512,  609,  724,  861,  1024, 1218,  1448,  1722,  2048,  2435,  2896,  3444, 4096,
      4871, 5793, 6889, 8192, 9742, 11585, 13777, 16384, 19484, 23170, 27554, 32768};
  static constexpr std::size_t tier_features = 3 + knot_count;
  static constexpr std::size_t intra_first = 2;
  static constexpr std::size_t inter_first = intra_first + tier_features;
  static constexpr std::size_t microbatch_feature = inter_first + tier_features;
  static constexpr std::size_t feature_count = microbatch_feature + 1;
  //! A hinge is fitted only where at least this many rows lie beyond its knot: with fewer, a
  //! hinge fits noise (docs/benchmarks.md, "Calibration", has the measurement).
  static constexpr std::size_t rows_per_hinge = 8;
  //! The name of feature `k`, for errors: "tokens_per_rank", "length^2/cp", then per tier
  //! "intra-node (cp-1)", "... (cp-1)*t", "... (cp-1)*t^2", "... (cp-1)*max(0, t-K)" at each
  //! knot K, and "micro-batch".
  [[nodiscard]] static std::string feature_name(std::size_t k) {
    if (k < intra_first)
      return k == 0 ? "tokens_per_rank" : "length^2/cp";
    if (k >= microbatch_feature)
      return "micro-batch";
    const char* tier = k < inter_first ? "intra-node" : "inter-node";
    const std::size_t j = (k - intra_first) % tier_features;
    if (j < 3)
      return fmt::format("{} (cp-1){}", tier, j == 0 ? "" : j == 1 ? "*t" : "*t^2");
    return fmt::format("{} (cp-1)*max(0, t-{})", tier, knots[j - 3]);
  }

  //! The features of a sample row (t = L/cp; the micro-batch feature 0).
  static std::array<double, feature_count> features(std::int64_t length, std::int32_t cp,
                                                    std::int32_t gpus_per_node) noexcept {
    const double l = static_cast<double>(length);
    const double c = static_cast<double>(cp);
    const double steps = c - 1.0;
    const double t = l / c;
    std::array<double, feature_count> x{};
    x[0] = t;
    x[1] = l * l / c;
    if (cp > 1) {
      const std::size_t first = cp > gpus_per_node ? inter_first : intra_first;
      x[first] = steps;
      x[first + 1] = steps * t;
      x[first + 2] = steps * t * t;
      for (std::size_t j = 0; j < knot_count; ++j)
        x[first + 3 + j] = steps * std::max(0.0, t - knots[j]);
    }
    return x;
  }
  //! The features of a row: a sample's, or only the micro-batch feature.
  static std::array<double, feature_count> features(const calibration_row& r,
                                                    std::int32_t gpus_per_node) noexcept {
    if (!r.microbatch)
      return features(r.length, r.cp, gpus_per_node);
    std::array<double, feature_count> x{};
    x[microbatch_feature] = 1.0;
    return x;
  }

  //! A row in relative terms: its features divided by its time.
  static std::array<double, feature_count> relative_features(const calibration_row& r,
                                                             std::int32_t gpus_per_node) {
    auto x = features(r, gpus_per_node);
    for (double& v : x)
      v /= r.seconds;
    return x;
  }

  //! Per column, the largest |x| of the rows in relative terms (0: no row exercises it).
  static std::array<double, feature_count> column_scales(std::span<const calibration_row> rows,
                                                         std::int32_t gpus_per_node) {
    std::array<double, feature_count> scale{};
    for (const calibration_row& r : rows) {
      const auto x = relative_features(r, gpus_per_node);
      for (std::size_t k = 0; k < feature_count; ++k)
        scale[k] = std::max(scale[k], std::abs(x[k]));
    }
    return scale;
  }

  static constexpr bool is_hinge(std::size_t k) {
    return k >= intra_first && k < microbatch_feature && (k - intra_first) % tier_features >= 3;
  }
  //! t^2 and the hinges: left out where the rows cannot determine them.
  static constexpr bool is_shape(std::size_t k) {
    return k >= intra_first && k < microbatch_feature && (k - intra_first) % tier_features >= 2;
  }

  //! The columns the fit starts from: those some row exercises, a hinge only where at least
  //! `rows_per_hinge` rows lie beyond its knot (one row would fit itself exactly and teach
  //! nothing) and one lies before the next knot (without, the rows fix only the sum of the
  //! bends between two measured points, and the fit zigzags between them to match it: the
  //! grid of powers of two measures none of three pieces in four); the required columns first
  //! (compute, each tier's latency and bandwidth, the micro-batch), then the shape columns, which
  //! are left out, last first, where the rows cannot determine them (too few rows, or a column that
  //! is nearly a combination of others).
  static std::vector<std::size_t> used_columns(std::span<const calibration_row> rows,
                                               std::int32_t gpus_per_node,
                                               const std::array<double, feature_count>& scale) {
    std::array<std::size_t, feature_count> exercised{};
    std::array<bool, feature_count> bent{}; // a hinge: a row between its knot and the next
    for (const calibration_row& r : rows) {
      const auto x = features(r, gpus_per_node);
      for (std::size_t k = 0; k < feature_count; ++k)
        exercised[k] += x[k] != 0 ? 1 : 0;
      if (r.microbatch || r.cp <= 1)
        continue;
      const double t = static_cast<double>(r.length) / static_cast<double>(r.cp);
      const std::size_t first = r.cp > gpus_per_node ? inter_first : intra_first;
      for (std::size_t j = 0; j < knot_count; ++j)
        if (t > knots[j] && (j + 1 == knot_count || t <= knots[j + 1]))
          bent[first + 3 + j] = true;
    }
    std::vector<std::size_t> used;
    for (std::size_t k = 0; k < feature_count; ++k)
      if (scale[k] > 0 && (!is_hinge(k) || (exercised[k] >= rows_per_hinge && bent[k])))
        used.push_back(k);
    std::stable_partition(used.begin(), used.end(), [](std::size_t k) { return !is_shape(k); });
    const std::size_t n = rows.size();
    const auto required = static_cast<std::size_t>(
        std::count_if(used.begin(), used.end(), [](std::size_t k) { return !is_shape(k); }));
    if (n < required)
      throw error(status_code::parse_error,
                  fmt::format("calibration: {} rows cannot determine the {} coefficients their "
                              "(length, cp) points exercise; measure at least {} points",
                              n, required, required));
    while (used.size() > n)
      used.pop_back();
    return used;
  }

  //! The least-squares coefficients over the columns `used`, shape columns the rows do not
  //! determine dropped from `used` (a required one is an error).
  static std::array<double, feature_count>
  least_squares(std::span<const calibration_row> rows, std::int32_t gpus_per_node,
                const std::array<double, feature_count>& scale, std::vector<std::size_t>& used) {
    const std::size_t n = rows.size();
    for (;;) {
      const std::size_t p = used.size();
      // A (n x p, column-major) and b
      std::vector<double> a(n * p);
      std::vector<double> b(n, 1.0);
      for (std::size_t i = 0; i < n; ++i) {
        const auto x = relative_features(rows[i], gpus_per_node);
        for (std::size_t j = 0; j < p; ++j)
          a[j * n + i] = x[used[j]] / scale[used[j]];
      }
      const std::size_t undetermined = detail::householder_qr(a, b, n, p, [&](std::size_t j) {
        return (is_shape(used[j]) ? 1e-7 : 1e-10) * std::sqrt(static_cast<double>(n));
      });
      if (undetermined < p) {
        if (!is_shape(used[undetermined]))
          throw error(status_code::parse_error,
                      fmt::format("calibration: the rows do not determine the coefficient of {} "
                                  "(it is a combination of the others); vary length and cp more",
                                  feature_name(used[undetermined])));
        used.erase(used.begin() + static_cast<std::ptrdiff_t>(undetermined));
        continue;
      }
      const std::vector<double> solution = back_substitute(a, b, n, p);
      std::array<double, feature_count> coefficients{};
      for (std::size_t j = 0; j < p; ++j)
        coefficients[used[j]] = solution[j] / scale[used[j]];
      return coefficients;
    }
  }
};

} // namespace dcpp::detail
