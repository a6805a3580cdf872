// An estimator fitted by least squares to measured (length, cp, seconds) rows and, optionally,
// measured micro-batch overheads.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"
#include "dcpp/planner/calibration_rows.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/network.hpp"
#include "dcpp/planner/util/householder.hpp"

namespace dcpp {

//! cost(L, cp) = max(0, compute + ring), with t = L/cp the tokens per rank:
//!   compute: a*t + b*L^2/cp (linear layers, causal attention);
//!   ring:    max(0, (cp-1) * g(t)), one g per network tier (a group inside a node, cp <=
//!            gpus_per_node, or one spanning nodes): g(t) = c0 + c1*t + c2*t^2 +
//!            sum_j d_j*max(0, t - k_j) at knots k_j from 512 to 32K tokens per rank. A ring
//!            step's exposed time is its transfer (latency + bytes, linear in t) less the
//!            attention that hides it (quadratic in t) while positive, then zero: the
//!            quadratic follows the first part, the hinges the bend to zero;
//!   micro-batch: a fixed cost `m` fitted from micro-batch rows (none without such rows: the
//!            planner then uses its default, see `microbatch_overhead(problem, estimator)`).
//! `fit` solves the least-squares problem in relative terms (each row divided by its measured
//! time, so that short and long samples weigh alike) with Householder QR on column-scaled
//! features. Features that no row exercises (all cp = 1: the ring terms; no group beyond a
//! node: the inter-node terms) get coefficient 0, and so do the shape terms (t^2, the hinges)
//! that the rows cannot determine: fewer than `rows_per_hinge` rows beyond a knot, or a column
//! that is nearly a combination of the others. An undetermined compute, latency or bandwidth
//! term is an error.
//! The formula can fall as the length grows where the rows have a kink between knots (the length
//! at which the ring's exchange stops hiding behind compute): `cost` is its running maximum over
//! the lengths from 1 up, the least non-decreasing cost at or above it, so a fit of a real
//! cluster's timings always gives a cost the planner can use; the report says how much that
//! lifts it (`calibration_report::envelope_lift`).
class calibrated_cost {
public:
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

  calibrated_cost() = default;
  explicit calibrated_cost(std::array<double, feature_count> coefficients,
                           std::int32_t gpus_per_node = 8, bool has_overhead = false)
      : coefficients_(coefficients), gpus_per_node_(gpus_per_node), has_overhead_(has_overhead) {}

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

  [[nodiscard]] static std::string name() { return "calibrated"; }

  //! The fitted time: the formula (`formula`) where it is at least its value at every shorter
  //! length on `cp` ranks, else that running maximum (the least non-decreasing cost at or above
  //! the formula). The lift applies only beyond one part in 1e9, so that a formula that rises
  //! everywhere keeps its bits (the maximum is evaluated in another order of operations).
  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const noexcept {
    const double direct = formula(length, cp);
    const double envelope = running_maximum(length, cp);
    return envelope > direct * (1 + 1e-9) ? envelope : direct;
  }

  //! The fitted formula itself: the features' sum term by term as `features` lays them out (the
  //! ring's part, exposed communication, never below zero); it may fall as the length grows.
  [[nodiscard]] double formula(std::int64_t length, std::int32_t cp) const noexcept {
    const double l = static_cast<double>(length);
    const double c = static_cast<double>(cp);
    const double t = l / c;
    const double compute = coefficients_[0] * t + coefficients_[1] * (l * l / c);
    if (cp <= 1)
      return std::max(0.0, compute);
    const double* g = coefficients_.data() + (cp > gpus_per_node_ ? inter_first : intra_first);
    const double steps = c - 1.0;
    double ring = g[0] * steps + g[1] * (steps * t) + g[2] * (steps * t * t);
    for (std::size_t j = 0; j < knot_count && t > knots[j]; ++j)
      ring += g[3 + j] * (steps * (t - knots[j]));
    return std::max(0.0, compute + std::max(0.0, ring));
  }

  //! The largest value of the formula over the lengths from 1 to `length` on `cp` ranks. In
  //! tokens per rank t = length/cp the formula is max(0, compute, compute + ring), and each
  //! branch is a quadratic between knots (b*L^2/cp = b*cp*t^2), so its maximum over an interval
  //! is at a piece's ends or at a concave piece's vertex.
  [[nodiscard]] double running_maximum(std::int64_t length, std::int32_t cp) const noexcept {
    const double c = static_cast<double>(cp);
    const double t = static_cast<double>(length) / c;
    const double first = 1.0 / c;
    if (!(t > first))
      return formula(length, cp);
    const double a = coefficients_[0];
    const double bc = coefficients_[1] * c;
    double best = std::max(0.0, quadratic_maximum(bc, a, 0.0, first, t));
    if (cp <= 1)
      return best;
    // compute + ring on the piece after the last knot passed: each hinge passed adds its
    // coefficient to the slope and takes the coefficient times its knot from the constant
    const double* g = coefficients_.data() + (cp > gpus_per_node_ ? inter_first : intra_first);
    const double steps = c - 1.0;
    double slope = g[1];
    double constant = g[0];
    double lower = first;
    for (std::size_t j = 0; j <= knot_count; ++j) {
      const double upper = j < knot_count ? std::min(t, knots[j]) : t;
      if (upper >= lower)
        best = std::max(best, quadratic_maximum(bc + steps * g[2], a + steps * slope,
                                                steps * constant, lower, upper));
      if (upper >= t)
        break;
      slope += g[3 + j];
      constant -= g[3 + j] * knots[j];
      lower = std::max(lower, knots[j]);
    }
    return best;
  }

  //! The fitted micro-batch overhead (seconds), or none when no micro-batch row was measured.
  [[nodiscard]] std::optional<double> microbatch_overhead() const noexcept {
    return has_overhead_ ? std::optional<double>(coefficients_[microbatch_feature]) : std::nullopt;
  }

  //! The network the fit assumed: only the node size (the tiers' rates are in the coefficients).
  [[nodiscard]] network_spec network() const noexcept {
    return {gpus_per_node_, link_tier{}, link_tier{}};
  }

  [[nodiscard]] const std::array<double, feature_count>& coefficients() const noexcept {
    return coefficients_;
  }
  [[nodiscard]] std::int32_t gpus_per_node() const noexcept { return gpus_per_node_; }
  //! The residuals of the fit that made this estimator (empty for one built from coefficients).
  [[nodiscard]] const calibration_report& report() const noexcept { return report_; }

  //! Fits the coefficients to `rows` measured on nodes of `gpus_per_node` GPUs; throws
  //! dcpp::error naming the row, the undetermined feature, or a fit that prices nothing.
  static calibrated_cost fit(std::span<const calibration_row> rows,
                             std::int32_t gpus_per_node = 8) {
    detail::check_calibration_rows(rows, gpus_per_node);
    const std::array<double, feature_count> scale = column_scales(rows, gpus_per_node);
    std::vector<std::size_t> used = used_columns(rows, gpus_per_node, scale);
    for (;;) {
      calibrated_cost fitted(least_squares(rows, gpus_per_node, scale, used), gpus_per_node,
                             scale[microbatch_feature] > 0);
      fitted.fill_report(rows, used.size());
      // a formula that falls over the measured range bends where its rows do not make it: the
      // hinge nearest the lift goes and the rows are fitted again, until it rises (within
      // `lift_tolerance`) or no hinge of that tier is left; the envelope covers the rest
      const calibration_report& r = fitted.report_;
      if (!(r.envelope_lift > lift_tolerance) || r.lift_cp <= 1)
        return fitted;
      const std::size_t first = r.lift_cp > gpus_per_node ? inter_first : intra_first;
      const double t = static_cast<double>(r.lift_length) / static_cast<double>(r.lift_cp);
      auto nearest = used.end();
      for (auto k = used.begin(); k != used.end(); ++k)
        if (is_hinge(*k) && *k >= first && *k < first + tier_features &&
            (nearest == used.end() || std::abs(std::log(knots[*k - first - 3] / t)) <
                                          std::abs(std::log(knots[*nearest - first - 3] / t))))
          nearest = k;
      if (nearest == used.end())
        return fitted;
      used.erase(nearest);
    }
  }

  //! The envelope's lift a fit may keep without dropping a hinge (relative).
  static constexpr double lift_tolerance = 0.005;

  //! A fit is only as good as the lengths its rows cover: below them it may price a sample at
  //! zero, and far beyond them at infinity, and a plan made with it would be wrong without a
  //! word. (It never prices a longer sample below a shorter one: `cost` is non-decreasing.)
  //! Checks every distinct length of `lengths` at every size of `sizes` from `smallest_cp[s]`
  //! up: the price must be positive and finite. Throws dcpp::error naming the length, the size,
  //! the price and the range of lengths the rows measured.
  void check_lengths(std::span<const std::int64_t> lengths,
                     std::span<const std::int32_t> smallest_cp,
                     std::span<const std::int32_t> sizes) const {
    std::vector<std::pair<std::int64_t, std::int32_t>> by_length(lengths.size());
    for (std::size_t s = 0; s < lengths.size(); ++s)
      by_length[s] = {lengths[s], smallest_cp[s]};
    std::sort(by_length.begin(), by_length.end());
    by_length.erase(std::unique(by_length.begin(), by_length.end(),
                                [](const auto& a, const auto& b) { return a.first == b.first; }),
                    by_length.end());
    const std::string measured =
        report_.rows == 0
            ? std::string("a fit given by its coefficients")
            : fmt::format("the calibration rows measured lengths {} to {}; measure samples that "
                          "cover the batch",
                          report_.shortest, report_.longest);
    for (const std::int32_t cp : sizes)
      for (const auto& [length, smallest] : by_length) {
        if (smallest > cp)
          continue;
        const double price = cost(length, cp);
        if (!(price > 0) || !std::isfinite(price))
          throw error(status_code::invalid_option,
                      fmt::format("calibrated: the fit prices a sample of length {} on {} ranks "
                                  "at {} s, not a time > 0 ({})",
                                  length, cp, price, measured));
      }
  }

private:
  //! The largest value of q2*t^2 + q1*t + q0 over [from, to].
  static double quadratic_maximum(double q2, double q1, double q0, double from,
                                  double to) noexcept {
    const auto q = [&](double x) { return (q2 * x + q1) * x + q0; };
    double best = std::max(q(from), q(to));
    if (q2 < 0) {
      const double vertex = -q1 / (2 * q2);
      if (vertex > from && vertex < to)
        best = std::max(best, q(vertex));
    }
    return best;
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
      std::vector<double> solution(p);
      for (std::size_t jj = p; jj-- > 0;) {
        double s = b[jj];
        for (std::size_t k = jj + 1; k < p; ++k)
          s -= a[k * n + jj] * solution[k];
        solution[jj] = s / a[jj * n + jj];
      }
      std::array<double, feature_count> coefficients{};
      for (std::size_t j = 0; j < p; ++j)
        coefficients[used[j]] = solution[j] / scale[used[j]];
      return coefficients;
    }
  }

  //! The fit's report over `rows` (with `p` coefficients); a fit that prices a measured sample
  //! at zero or below is refused (its rows cannot describe a time that grows with the work).
  void fill_report(std::span<const calibration_row> rows, std::size_t p) {
    const std::size_t n = rows.size();
    calibration_report& report = report_;
    report.rows = n;
    report.coefficients = p;
    double sum2 = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& r = rows[i];
      const double predicted =
          r.microbatch ? coefficients_[microbatch_feature] : cost(r.length, r.cp);
      if (!(predicted > 0))
        throw error(status_code::parse_error,
                    fmt::format("calibration row {}: the fit prices (length = {}, cp = {}) at {} "
                                "s where {} s was measured; the rows do not describe a cost that "
                                "grows with the work (check their units and columns)",
                                i + 1, r.length, r.cp, predicted, r.seconds));
      const double relative = (predicted - r.seconds) / r.seconds;
      sum2 += relative * relative;
      if (std::abs(relative) > report.max_relative) {
        report.max_relative = std::abs(relative);
        report.worst_row = i + 1;
      }
    }
    report.rms_relative = std::sqrt(sum2 / static_cast<double>(n));
    std::vector<std::int32_t> sizes;
    for (const auto& r : rows)
      if (!r.microbatch) {
        report.shortest = report.shortest == 0 ? r.length : std::min(report.shortest, r.length);
        report.longest = std::max(report.longest, r.length);
        sizes.push_back(r.cp);
      }
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    // the envelope's lift over the measured range, at lengths 2^(1/64) apart
    for (const std::int32_t cp : sizes)
      for (double l = static_cast<double>(report.shortest);; l *= 1.0109) {
        const auto length = std::min(static_cast<std::int64_t>(l), report.longest);
        const double direct = formula(length, cp);
        const double lift = direct > 0 ? cost(length, cp) / direct - 1 : 0.0;
        if (lift > report.envelope_lift)
          report.envelope_lift = lift, report.lift_length = length, report.lift_cp = cp;
        if (length == report.longest)
          break;
      }
  }

  std::array<double, feature_count> coefficients_{};
  std::int32_t gpus_per_node_ = 8;
  bool has_overhead_ = false;
  calibration_report report_{};
};
static_assert(workload_estimator<calibrated_cost>);

} // namespace dcpp
