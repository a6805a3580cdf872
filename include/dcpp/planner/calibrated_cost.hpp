// An estimator fitted by least squares to measured (length, cp, seconds) rows.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"
#include "dcpp/planner/estimator.hpp"

namespace dcpp {

//! One measurement: a sample of `length` tokens on a group of `cp` ranks took `seconds` per rank.
struct calibration_row {
  std::int64_t length = 0;
  std::int32_t cp = 1;
  double seconds = 0;
};

//! cost(L, cp) = max(0, a*L/cp + b*L^2/cp + c*(cp-1) + d*(cp-1)*L/cp): linear work, causal
//! attention, and the ring's latency and bandwidth terms (zero for cp = 1).
//! `fit` solves the least-squares problem with Householder QR on column-scaled features;
//! features that no row exercises (all cp = 1: the ring terms) get coefficient 0.
class calibrated_cost {
public:
  static constexpr std::size_t feature_count = 4;
  static constexpr std::array<std::string_view, feature_count> feature_names{
      "tokens_per_rank", "length^2/cp", "cp-1", "(cp-1)*tokens_per_rank"};

  calibrated_cost() = default;
  explicit calibrated_cost(std::array<double, feature_count> coefficients)
      : coefficients_(coefficients) {}

  static std::array<double, feature_count> features(std::int64_t length, std::int32_t cp) noexcept {
    const double l = static_cast<double>(length);
    const double c = static_cast<double>(cp);
    return {l / c, l * l / c, c - 1.0, (c - 1.0) * l / c};
  }

  [[nodiscard]] static std::string name() { return "calibrated"; }

  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const noexcept {
    const auto x = features(length, cp);
    double sum = 0;
    for (std::size_t k = 0; k < feature_count; ++k)
      sum += coefficients_[k] * x[k];
    return std::max(0.0, sum);
  }

  [[nodiscard]] const std::array<double, feature_count>& coefficients() const noexcept {
    return coefficients_;
  }

  //! Fits the coefficients; throws dcpp::error naming the row or the undetermined feature.
  static calibrated_cost fit(std::span<const calibration_row> rows) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r.length <= 0 || r.cp <= 0 || !(r.seconds >= 0) || !std::isfinite(r.seconds))
        throw error(status_code::parse_error,
                    fmt::format("calibration row {}: (length = {}, cp = {}, seconds = {}) must "
                                "have length > 0, cp > 0 and finite seconds >= 0",
                                i + 1, r.length, r.cp, r.seconds));
    }
    // columns that some row exercises
    std::array<double, feature_count> scale{};
    for (const auto& r : rows) {
      const auto x = features(r.length, r.cp);
      for (std::size_t k = 0; k < feature_count; ++k)
        scale[k] = std::max(scale[k], std::abs(x[k]));
    }
    std::vector<std::size_t> used;
    for (std::size_t k = 0; k < feature_count; ++k)
      if (scale[k] > 0)
        used.push_back(k);
    const std::size_t n = rows.size();
    const std::size_t p = used.size();
    if (n < p)
      throw error(status_code::parse_error,
                  fmt::format("calibration: {} rows cannot determine {} coefficients; measure at "
                              "least {} (length, cp) points",
                              n, p, p));
    // A (n x p, column-major) and b, scaled so every column has max |x| = 1
    std::vector<double> a(n * p);
    std::vector<double> b(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto x = features(rows[i].length, rows[i].cp);
      for (std::size_t j = 0; j < p; ++j)
        a[j * n + i] = x[used[j]] / scale[used[j]];
      b[i] = rows[i].seconds;
    }
    // Householder QR, applied to b as we go
    for (std::size_t j = 0; j < p; ++j) {
      double norm = 0;
      for (std::size_t i = j; i < n; ++i)
        norm += a[j * n + i] * a[j * n + i];
      norm = std::sqrt(norm);
      if (norm < 1e-12 * std::sqrt(static_cast<double>(n)))
        throw error(status_code::parse_error,
                    fmt::format("calibration: the rows do not determine the coefficient of {} "
                                "(it is a combination of the others); vary length and cp more",
                                feature_names[used[j]]));
      const double alpha = a[j * n + j] > 0 ? -norm : norm;
      std::vector<double> v(n - j);
      for (std::size_t i = j; i < n; ++i)
        v[i - j] = a[j * n + i];
      v[0] -= alpha;
      double vnorm2 = 0;
      for (const double x : v)
        vnorm2 += x * x;
      auto reflect = [&](double* col) {
        double dot = 0;
        for (std::size_t i = j; i < n; ++i)
          dot += v[i - j] * col[i];
        const double f = 2.0 * dot / vnorm2;
        for (std::size_t i = j; i < n; ++i)
          col[i] -= f * v[i - j];
      };
      for (std::size_t k = j; k < p; ++k)
        reflect(&a[k * n]);
      reflect(b.data());
    }
    std::array<double, feature_count> coefficients{};
    std::vector<double> solution(p);
    for (std::size_t jj = p; jj-- > 0;) {
      double s = b[jj];
      for (std::size_t k = jj + 1; k < p; ++k)
        s -= a[k * n + jj] * solution[k];
      solution[jj] = s / a[jj * n + jj];
    }
    for (std::size_t j = 0; j < p; ++j)
      coefficients[used[j]] = solution[j] / scale[used[j]];
    return calibrated_cost(coefficients);
  }

private:
  std::array<double, feature_count> coefficients_{};
};
static_assert(workload_estimator<calibrated_cost>);

} // namespace dcpp
