// Householder QR of a small dense least-squares system, for the calibration fit.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace dcpp::detail {

//! Householder QR of `a` (n x p, column-major), applied to `b` as it goes: afterwards the upper
//! triangle of `a`'s first p rows is R and `b`'s first p entries are Q^T b. Stops at the first
//! column whose part independent of the columns before has a norm below `threshold(j)` (it is
//! not determined by the rows) and returns its index; returns p where every column is.
template <class Threshold>
std::size_t householder_qr(std::vector<double>& a, std::vector<double>& b, std::size_t n,
                           std::size_t p, Threshold&& threshold) {
  for (std::size_t j = 0; j < p; ++j) {
    double norm = 0;
    for (std::size_t i = j; i < n; ++i)
      norm += a[j * n + i] * a[j * n + i];
    norm = std::sqrt(norm);
    if (norm < threshold(j))
      return j;
    const double alpha = a[j * n + j] > 0 ? -norm : norm;
    std::vector<double> v(n - j);
    for (std::size_t i = j; i < n; ++i)
      v[i - j] = a[j * n + i];
    v[0] -= alpha;
    double vnorm2 = 0;
    for (const double x : v)
      vnorm2 += x * x;
    const auto reflect = [&](double* col) {
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
  return p;
}

//! The least-squares solution after `householder_qr` returned p: R x = Q^T b by back
//! substitution.
inline std::vector<double> back_substitute(const std::vector<double>& a,
                                           const std::vector<double>& b, std::size_t n,
                                           std::size_t p) {
  std::vector<double> x(p);
  for (std::size_t j = p; j-- > 0;) {
    double s = b[j];
    for (std::size_t k = j + 1; k < p; ++k)
      s -= a[k * n + j] * x[k];
    x[j] = s / a[j * n + j];
  }
  return x;
}

} // namespace dcpp::detail
