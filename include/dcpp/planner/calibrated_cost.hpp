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
#include "dcpp/planner/calibration_hinges.hpp"
#include "dcpp/planner/calibration_rows.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/exposure_fit.hpp"
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
//! Or, the exposure form: per tier, ring = s * (cp-1) * shape(t), the exchange as
//! transformer_cost prices it (`exposure_shape`: a forward and a backward step's transfer less
//! the attention that hides it, while positive) with a fitted latency s and shape. `fit` fits
//! both forms and keeps the one whose residuals' standard error (`calibration_report::
//! standard_error`: the rms counted against the rows less the coefficients, since a form with
//! as many coefficients as rows fits any rows) is smaller, the exposure form on a tie (to within
//! rounding): rows timed from a cost of that form are priced exactly between the measured
//! points too, where the hinges only interpolate.
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
class calibrated_cost : public detail::hinge_layout {
public:
  calibrated_cost() = default;
  explicit calibrated_cost(std::array<double, feature_count> coefficients,
                           std::int32_t gpus_per_node = 8, bool has_overhead = false)
      : coefficients_(coefficients), gpus_per_node_(gpus_per_node), has_overhead_(has_overhead) {}
  //! The exposure form: compute a, b; per tier (inside a node, across nodes) the latency s and
  //! shape (a shape with curvature 0 leaves the tier unmeasured: no ring); overhead m or none.
  calibrated_cost(double a, double b, std::array<double, 2> latency,
                  std::array<exposure_shape, 2> shapes, std::optional<double> overhead,
                  std::int32_t gpus_per_node = 8)
      : gpus_per_node_(gpus_per_node), has_overhead_(overhead.has_value()), exposure_(shapes) {
    for (std::size_t i = 0; i < 2; ++i)
      if (shapes[i].curvature > 0)
        ends_[i] = {shapes[i].forward_end(), shapes[i].backward_end()};
    coefficients_[0] = a, coefficients_[1] = b,
    coefficients_[microbatch_feature] = overhead.value_or(0);
    coefficients_[intra_first] = latency[0], coefficients_[inter_first] = latency[1];
  }

  [[nodiscard]] static std::string name() { return "calibrated"; }

  //! The fitted time: the formula (`formula`) where it is at least its value at every shorter
  //! length on `cp` ranks, else that running maximum (the least non-decreasing cost at or above
  //! the formula). The lift applies only beyond one part in 1e9, so that a formula that rises
  //! everywhere keeps its bits (the maximum is evaluated in another order of operations).
  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const noexcept {
    const double direct = formula(length, cp);
    if (rises(length, cp))
      return direct; // the running maximum is the formula itself
    const double envelope = running_maximum(length, cp);
    return envelope > direct * (1 + 1e-9) ? envelope : direct;
  }

  //! Whether the formula provably never falls over the lengths from 1 to `length` on `cp` ranks
  //! (a cheap test, false where unsure): compute with a, b >= 0 and, on one rank or in the
  //! exposure form with a latency >= 0, a slope that is >= 0 at every piece's ends (it is linear
  //! in t between the ends of the steps' exposure).
  [[nodiscard]] bool rises(std::int64_t length, std::int32_t cp) const noexcept {
    const double a = coefficients_[0];
    const double b = coefficients_[1];
    if (!(a >= 0 && b >= 0))
      return false;
    if (cp <= 1)
      return true;
    const std::size_t tier = cp > gpus_per_node_ ? 1 : 0;
    const exposure_shape& shape = exposure_[tier];
    const double c = static_cast<double>(cp);
    const double k = (c - 1.0) * coefficients_[tier == 1 ? inter_first : intra_first];
    if (!(shape.curvature > 0) || !(k >= 0))
      return false;
    const double t = static_cast<double>(length) / c;
    // (plain names: clang before 16 does not capture structured bindings)
    const double forward = ends_[tier][0];
    const double backward = ends_[tier][1];
    const auto rising = [&](double x) {
      return a + 2 * b * c * x + k * shape.slope_below(x, forward, backward) >= 0;
    };
    return rising(1.0 / c) && rising(std::min(t, forward)) && rising(std::min(t, backward)) &&
           rising(t);
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
    const exposure_shape& shape = exposure_[cp > gpus_per_node_ ? 1 : 0];
    if (shape.curvature > 0)
      return std::max(0.0, compute + std::max(0.0, g[0] * (steps * shape(t))));
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
    double best = std::max(0.0, detail::quadratic_maximum(bc, a, 0.0, first, t));
    if (cp <= 1)
      return best;
    const exposure_shape& shape = exposure_[cp > gpus_per_node_ ? 1 : 0];
    if (shape.curvature > 0) {
      // the exposure form: a quadratic between the ends of the steps' exposure
      const double s = (c - 1.0) * coefficients_[cp > gpus_per_node_ ? inter_first : intra_first];
      const std::array<double, 2>& ends = ends_[cp > gpus_per_node_ ? 1 : 0];
      const double forward = ends[0];
      const double backward = ends[1];
      shape.for_each_piece(first, t, forward, backward,
                           [&](double from, double to, double q2, double q1, double q0) {
                             best = std::max(best, detail::quadratic_maximum(
                                                       bc + s * q2, a + s * q1, s * q0, from, to));
                           });
      return best;
    }
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
        best = std::max(best, detail::quadratic_maximum(bc + steps * g[2], a + steps * slope,
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
    calibrated_cost hinged = fit_hinges(rows, gpus_per_node);
    const auto e = detail::fit_exposure(rows, gpus_per_node);
    if (!e)
      return hinged;
    const auto& k = e->coefficients;
    const bool overhead = hinged.has_overhead_;
    calibrated_cost exposed(k[0], k[1], {k[2], k[3]}, e->shapes,
                            overhead ? std::optional(k[4]) : std::nullopt, gpus_per_node);
    for (const calibration_row& r : rows)
      if (!((r.microbatch ? k[4] : exposed.cost(r.length, r.cp)) > 0))
        return hinged; // fill_report would refuse it
    const std::size_t linear = static_cast<std::size_t>(
        std::count_if(k.begin(), k.end(), [](double v) { return v != 0; }));
    const std::size_t shaped =
        (e->shapes[0].curvature > 0 ? 2 : 0) + (e->shapes[1].curvature > 0 ? 2 : 0);
    exposed.fill_report(rows, linear + shaped);
    // a tie within rounding (both forms exact on the rows) goes to the exposure form
    const double hinge_error = hinged.report_.standard_error();
    return exposed.report_.standard_error() <= hinge_error * (1 + 1e-9) + 1e-12 ? exposed : hinged;
  }

  //! The exposure form's shape of each tier (curvature 0: the tier is in the hinge form).
  [[nodiscard]] const std::array<exposure_shape, 2>& exposure() const noexcept { return exposure_; }

  //! The fit in the hinge form alone (`fit` keeps the better of the two forms); throws as `fit`.
  static calibrated_cost fit_hinges(std::span<const calibration_row> rows,
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
    report.form = exposure_[0].curvature > 0 || exposure_[1].curvature > 0 ? "exposure" : "hinge";
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
  std::array<exposure_shape, 2> exposure_{};
  std::array<std::array<double, 2>, 2> ends_{}; //!< each shape's forward and backward end
  calibration_report report_{};
};
static_assert(workload_estimator<calibrated_cost>);

} // namespace dcpp
