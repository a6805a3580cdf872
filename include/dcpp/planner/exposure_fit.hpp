// The ring's exposed exchange in the form transformer_cost prices it, fitted to calibration rows
// (calibrated_cost's second form of the ring's part).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "dcpp/planner/calibration_rows.hpp"
#include "dcpp/planner/util/householder.hpp"

namespace dcpp {

//! The exposed time of one ring step as a function of the tokens per rank t, in units of the
//! step's latency: a forward step's transfer less the attention that hides it, 1 + B*t - H*t^2,
//! plus a backward step's, which moves twice the bytes (K, V, dK, dV) behind 2.5 times the
//! attention, 1 + 2B*t - 2.5H*t^2, each while positive. It is transformer_cost's ring divided by
//! its latency, so a fit in this form prices that cost exactly from a handful of rows, between
//! the rows as well as on them. `curvature` H > 0; 0 marks a shape that is not set.
struct exposure_shape {
  double slope = 0;     //!< B: transfer per token, over the latency
  double curvature = 0; //!< H: attention that hides the transfer per token^2, over the latency

  [[nodiscard]] double operator()(double t) const noexcept {
    return std::max(0.0, 1 + slope * t - curvature * t * t) +
           std::max(0.0, 1 + 2 * slope * t - 2.5 * curvature * t * t);
  }
  //! Where the forward and the backward step's exposure ends (the positive roots).
  [[nodiscard]] double forward_end() const noexcept {
    return (slope + std::sqrt(slope * slope + 4 * curvature)) / (2 * curvature);
  }
  [[nodiscard]] double backward_end() const noexcept {
    return (2 * slope + std::sqrt(4 * slope * slope + 10 * curvature)) / (5 * curvature);
  }
  //! The shape whose forward and backward exposure end at `forward` and `backward` tokens per
  //! rank, if one does (H > 0).
  [[nodiscard]] static std::optional<exposure_shape> from_ends(double forward,
                                                               double backward) noexcept {
    // B*f - H*f^2 = -1 and 2B*b - 2.5H*b^2 = -1
    const double det = forward * (-2.5 * backward * backward) + forward * forward * 2 * backward;
    if (!(det != 0))
      return std::nullopt;
    const exposure_shape s{(2.5 * backward * backward - forward * forward) / det,
                           (2 * backward - forward) / det};
    if (!(s.curvature > 0) || !std::isfinite(s.slope) || !std::isfinite(s.curvature))
      return std::nullopt;
    return s;
  }
  //! Calls `piece(from, to, q2, q1, q0)` for each piece of [from, to] on which the shape is
  //! the quadratic q2*t^2 + q1*t + q0 (the pieces end where a step's exposure does; `forward`
  //! and `backward` are `forward_end()` and `backward_end()`, computed once by the caller).
  template <class Piece>
  void for_each_piece(double from, double to, double forward, double backward,
                      Piece&& piece) const {
    const double ends[2] = {std::min(forward, backward), std::max(forward, backward)};
    double lower = from;
    for (std::size_t k = 0; k <= 2 && lower <= to; ++k) {
      const double upper = k < 2 ? std::min(to, ends[k]) : to;
      if (upper >= lower) {
        const double mid = 0.5 * (lower + upper);
        double q2 = 0, q1 = 0, q0 = 0;
        if (mid < forward)
          q2 -= curvature, q1 += slope, q0 += 1;
        if (mid < backward)
          q2 -= 2.5 * curvature, q1 += 2 * slope, q0 += 1;
        piece(lower, upper, q2, q1, q0);
      }
      lower = std::max(lower, upper);
      if (upper >= to)
        break;
    }
  }
  //! The shape's derivative just below `t` (at an end, the piece's before it), with the ends
  //! as for `for_each_piece`.
  [[nodiscard]] double slope_below(double t, double forward, double backward) const noexcept {
    double d = 0;
    if (t <= forward)
      d += slope - 2 * curvature * t;
    if (t <= backward)
      d += 2 * slope - 5 * curvature * t;
    return d;
  }
};

namespace detail {

//! The largest value of q2*t^2 + q1*t + q0 over [from, to].
inline double quadratic_maximum(double q2, double q1, double q0, double from, double to) noexcept {
  const auto q = [&](double x) { return (q2 * x + q1) * x + q0; };
  double best = std::max(q(from), q(to));
  if (q2 < 0) {
    const double vertex = -q1 / (2 * q2);
    if (vertex > from && vertex < to)
      best = std::max(best, q(vertex));
  }
  return best;
}

//! A fit of calibration rows in the exposure form: cost = a*t + b*L^2/cp + s_tier * (cp-1) *
//! shape_tier(t), plus a micro-batch overhead m. `coefficients` holds a, b, s_intra, s_inter, m.
struct exposure_fit {
  std::array<double, 5> coefficients{};
  std::array<exposure_shape, 2> shapes{};
  std::vector<double> residuals; //!< relative, of the formula (before any envelope), per row
  double rms = 0;                //!< of `residuals`
};

//! The linear part of the exposure fit for given shapes: least squares in relative terms on
//! column-scaled features (a column no row exercises gets 0); none when the rows do not
//! determine a column they exercise.
inline std::optional<exposure_fit> exposure_least_squares(std::span<const calibration_row> rows,
                                                          std::int32_t gpus_per_node,
                                                          const std::array<exposure_shape, 2>& s) {
  const auto features = [&](const calibration_row& r) {
    std::array<double, 5> x{};
    if (r.microbatch) {
      x[4] = 1;
      return x;
    }
    const double l = static_cast<double>(r.length);
    const double c = static_cast<double>(r.cp);
    x[0] = l / c;
    x[1] = l * l / c;
    if (r.cp > 1)
      x[r.cp > gpus_per_node ? 3 : 2] = (c - 1) * s[r.cp > gpus_per_node ? 1 : 0](l / c);
    return x;
  };
  const std::size_t n = rows.size();
  std::array<double, 5> scale{};
  for (const calibration_row& r : rows) {
    const auto x = features(r);
    for (std::size_t k = 0; k < 5; ++k)
      scale[k] = std::max(scale[k], std::abs(x[k] / r.seconds));
  }
  std::vector<std::size_t> used;
  for (std::size_t k = 0; k < 5; ++k)
    if (scale[k] > 0)
      used.push_back(k);
  const std::size_t p = used.size();
  if (p == 0 || n < p)
    return std::nullopt;
  std::vector<double> a(n * p);
  std::vector<double> b(n, 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = features(rows[i]);
    for (std::size_t j = 0; j < p; ++j)
      a[j * n + i] = x[used[j]] / rows[i].seconds / scale[used[j]];
  }
  const double threshold = 1e-10 * std::sqrt(static_cast<double>(n));
  if (householder_qr(a, b, n, p, [&](std::size_t) { return threshold; }) < p)
    return std::nullopt;
  exposure_fit fit{{}, s, {}, 0};
  const std::vector<double> solution = back_substitute(a, b, n, p);
  for (std::size_t j = 0; j < p; ++j)
    fit.coefficients[used[j]] = solution[j] / scale[used[j]];
  double sum2 = 0;
  fit.residuals.reserve(n);
  for (const calibration_row& r : rows) {
    const auto x = features(r);
    double predicted = 0;
    for (std::size_t k = 0; k < 5; ++k)
      predicted += fit.coefficients[k] * x[k];
    fit.residuals.push_back(predicted / r.seconds - 1);
    sum2 += fit.residuals.back() * fit.residuals.back();
  }
  fit.rms = std::sqrt(sum2 / static_cast<double>(n));
  return std::isfinite(fit.rms) ? std::optional(fit) : std::nullopt;
}

//! Levenberg-Marquardt on a tier's two ends from `ends`, in relative steps, with a Jacobian by
//! differences (the residuals are smooth between the tokens per rank of the rows, kinked where
//! an end crosses one); `at(forward, backward)` fits the rest for given ends.
template <class At>
std::optional<exposure_fit> descend(const At& at, std::array<double, 2> ends) {
  std::optional<exposure_fit> best = at(ends[0], ends[1]);
  if (!best)
    return std::nullopt;
  double damping = 1e-3;
  for (int iteration = 0; iteration < 100 && best->rms > 1e-14; ++iteration) {
    constexpr double h = 1e-7;
    const auto df = at(ends[0] * (1 + h), ends[1]);
    const auto db = at(ends[0], ends[1] * (1 + h));
    if (!df || !db)
      break;
    const std::vector<double>& r0 = best->residuals;
    double a11 = 0, a12 = 0, a22 = 0, g1 = 0, g2 = 0;
    for (std::size_t k = 0; k < r0.size(); ++k) {
      const double j1 = (df->residuals[k] - r0[k]) / h;
      const double j2 = (db->residuals[k] - r0[k]) / h;
      a11 += j1 * j1, a12 += j1 * j2, a22 += j2 * j2, g1 += j1 * r0[k], g2 += j2 * r0[k];
    }
    bool improved = false;
    for (int attempt = 0; attempt < 20 && !improved; ++attempt, damping *= 8) {
      const double m11 = a11 * (1 + damping);
      const double m22 = a22 * (1 + damping);
      const double det = m11 * m22 - a12 * a12;
      const double d1 = (-g1 * m22 + g2 * a12) / det;
      const double d2 = (-g2 * m11 + g1 * a12) / det;
      if (!(std::abs(d1) < 0.5 && std::abs(d2) < 0.5))
        continue;
      const std::array<double, 2> next{ends[0] * (1 + d1), ends[1] * (1 + d2)};
      if (const auto fit = at(next[0], next[1]); fit && fit->rms < best->rms) {
        best = fit, ends = next;
        damping = std::max(damping / 40, 1e-12); // /5 net of the loop's *8
        improved = true;
      }
    }
    if (!improved)
      break;
  }
  return best;
}

//! The shape of `tier`'s exposure (0: inside a node, 1: across nodes) that fits `rows` best,
//! the other tier's shape held: a grid of ends a factor sqrt(2) apart (or more, to keep it at 40
//! by 40) over the tokens per rank the tier's rows measure, from a quarter of the least to four
//! times the most; then `descend` from each of the grid's four best points.
//! Only + - * / and sqrt: the same bits on every platform.
inline std::optional<exposure_fit> fit_exposure_tier(std::span<const calibration_row> rows,
                                                     std::int32_t gpus_per_node,
                                                     std::array<exposure_shape, 2> shapes,
                                                     std::size_t tier) {
  double least = 0, most = 0;
  for (const calibration_row& r : rows)
    if (!r.microbatch && r.cp > 1 && (r.cp > gpus_per_node) == (tier == 1)) {
      const double t = static_cast<double>(r.length) / static_cast<double>(r.cp);
      least = least == 0 ? t : std::min(least, t);
      most = std::max(most, t);
    }
  if (most == 0)
    return std::nullopt;
  const auto at = [&](double forward, double backward) -> std::optional<exposure_fit> {
    const auto shape = exposure_shape::from_ends(forward, backward);
    if (!shape)
      return std::nullopt;
    shapes[tier] = *shape;
    return exposure_least_squares(rows, gpus_per_node, shapes);
  };
  // at most 40 points per end: a wider range takes coarser steps (2, 4, 16...)
  double step = std::sqrt(2.0);
  const auto fortieth_power = [](double x) {
    double p = 1;
    for (int i = 0; i < 40; ++i)
      p *= x;
    return p;
  };
  for (const double span = 16 * most / least; span > fortieth_power(step);)
    step *= step;
  struct start {
    double rms;
    std::array<double, 2> ends;
  };
  std::vector<start> grid;
  for (double f = least / 4; f <= most * 4; f *= step)
    for (double b = least / 4; b <= most * 4; b *= step)
      if (const auto fit = at(f, b))
        grid.push_back({fit->rms, {f, b}});
  if (grid.empty())
    return std::nullopt;
  // the grid's best points start a descent each: the best alone can lie in a poorer valley
  // when the rows are few (docs/benchmarks.md, "Calibration: the exposure form")
  const std::size_t starts = std::min<std::size_t>(grid.size(), 4);
  std::partial_sort(grid.begin(), grid.begin() + static_cast<std::ptrdiff_t>(starts), grid.end(),
                    [](const start& x, const start& y) {
                      return x.rms < y.rms || (x.rms == y.rms && x.ends < y.ends); // total
                    });
  std::optional<exposure_fit> best;
  for (std::size_t i = 0; i < starts; ++i)
    if (const auto fit = descend(at, grid[i].ends); fit && (!best || fit->rms < best->rms))
      best = fit;
  return best;
}

//! The exposure form's fit of `rows`: each tier's shape fitted on the rows without cp > 1 and
//! that tier's (the tiers share only the compute terms, which the one-rank rows pin), then all
//! rows at once with both shapes. None when the rows measure no ring or do not determine the
//! coefficients.
inline std::optional<exposure_fit> fit_exposure(std::span<const calibration_row> rows,
                                                std::int32_t gpus_per_node) {
  std::array<exposure_shape, 2> shapes{};
  bool ring = false;
  for (std::size_t tier = 0; tier < 2; ++tier) {
    std::vector<calibration_row> own;
    bool measured = false;
    for (const calibration_row& r : rows) {
      const bool in_tier = !r.microbatch && r.cp > 1 && (r.cp > gpus_per_node) == (tier == 1);
      measured = measured || in_tier;
      if (r.microbatch || r.cp <= 1 || in_tier)
        own.push_back(r);
    }
    if (!measured)
      continue;
    // the other tier's rows are absent here, so its shape does not matter
    const auto fit = fit_exposure_tier(own, gpus_per_node, shapes, tier);
    if (!fit)
      return std::nullopt;
    shapes[tier] = fit->shapes[tier];
    ring = true;
  }
  if (!ring)
    return std::nullopt;
  return exposure_least_squares(rows, gpus_per_node, shapes);
}

} // namespace detail
} // namespace dcpp
