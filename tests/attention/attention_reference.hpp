// fp64 reference of causal attention on whole sequences (forward O and LSE, backward dQ, dK, dV,
// GQA by summing over a KV head's query heads), written from the definitions and independent of
// the kernels; and the per-rank check shared by the local and MPI suites: one rank of a CP group
// runs the ring on its zigzag rows and compares every local row with the reference row it holds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "dcpp/attention/ring.hpp"
#include "dcpp/core/float16.hpp"

namespace dcpp_test::attention {

//! A packed batch in the full (unpadded) layout: q [tokens, heads, D], k [tokens, kv_heads, D],
//! v [tokens, kv_heads, Dv], dout [tokens, heads, Dv] (Dv = vdim, which may differ from D: MLA).
template <class T>
struct batch {
  std::vector<std::int32_t> cu{0};
  int heads = 0, kv_heads = 0, dim = 0, vdim = 0;
  float scale = 0.0f;
  std::vector<T> q, k, v, dout;
  [[nodiscard]] std::int64_t tokens() const { return cu.back(); }
  [[nodiscard]] dcpp::attention_shape shape() const {
    return {heads, kv_heads, dim, scale, vdim == dim ? 0 : vdim};
  }
};

//! Random inputs (uniform, never zero by construction: |x| >= 1/64), lengths from `lengths`.
template <class T>
batch<T> make_batch(std::uint64_t seed, const std::vector<int>& lengths, int heads, int kv_heads,
                    int dim, int vdim = 0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(1.0 / 64, 1.0);
  auto value = [&](double amplitude) {
    const double x = u(rng) * amplitude;
    return dcpp::from_float<T>(static_cast<float>(rng() % 2 ? x : -x));
  };
  batch<T> b;
  b.heads = heads, b.kv_heads = kv_heads, b.dim = dim, b.vdim = vdim != 0 ? vdim : dim;
  b.scale = 1.0f / std::sqrt(static_cast<float>(dim));
  for (const int l : lengths)
    b.cu.push_back(b.cu.back() + l);
  const auto qn = static_cast<std::size_t>(b.tokens() * heads * dim);
  const auto on = static_cast<std::size_t>(b.tokens() * heads * b.vdim);
  const auto kn = static_cast<std::size_t>(b.tokens() * kv_heads * dim);
  const auto vn = static_cast<std::size_t>(b.tokens() * kv_heads * b.vdim);
  for (std::size_t i = 0; i < qn; ++i)
    b.q.push_back(value(2.0));
  for (std::size_t i = 0; i < on; ++i)
    b.dout.push_back(value(1.0));
  for (std::size_t i = 0; i < kn; ++i)
    b.k.push_back(value(2.0));
  for (std::size_t i = 0; i < vn; ++i)
    b.v.push_back(value(1.0));
  return b;
}

struct reference {
  std::vector<double> o, lse, dq, dk, dv;
};

template <class T>
reference attend(const batch<T>& b) {
  const int H = b.heads, G = b.heads / b.kv_heads, D = b.dim, Dv = b.vdim;
  const auto at = [D](std::int64_t row, int heads, int h) { return (row * heads + h) * D; };
  const auto vat = [Dv](std::int64_t row, int heads, int h) { return (row * heads + h) * Dv; };
  const auto x = [](T t) { return static_cast<double>(dcpp::to_float(t)); };
  reference r;
  r.o.assign(b.dout.size(), 0.0), r.dq.assign(b.q.size(), 0.0);
  r.dk.assign(b.k.size(), 0.0), r.dv.assign(b.v.size(), 0.0);
  r.lse.assign(static_cast<std::size_t>(b.tokens() * H), 0.0);
  const double scale = b.scale;
  for (std::size_t s = 0; s + 1 < b.cu.size(); ++s) {
    const std::int64_t first = b.cu[s], len = b.cu[s + 1] - b.cu[s];
    for (int h = 0; h < H; ++h) {
      const int hk = h / G;
      for (std::int64_t i = 0; i < len; ++i) {
        const std::int64_t qi = at(first + i, H, h), oi = vat(first + i, H, h);
        std::vector<double> score(static_cast<std::size_t>(i + 1));
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += x(b.q[qi + d]) * x(b.k[at(first + j, b.kv_heads, hk) + d]);
          score[j] = dot * scale;
          mx = std::max(mx, score[j]);
        }
        double sum = 0;
        for (auto& e : score)
          sum += (e = std::exp(e - mx));
        for (auto& e : score)
          e /= sum; // probabilities
        r.lse[(first + i) * H + h] = mx + std::log(sum);
        for (std::int64_t j = 0; j <= i; ++j)
          for (int d = 0; d < Dv; ++d)
            r.o[oi + d] += score[j] * x(b.v[vat(first + j, b.kv_heads, hk) + d]);
        // Backward: dP = dO V^T, Dsum = dO . O, dS = P (dP - Dsum).
        double dsum = 0;
        for (int d = 0; d < Dv; ++d)
          dsum += x(b.dout[oi + d]) * r.o[oi + d];
        for (std::int64_t j = 0; j <= i; ++j) {
          const std::int64_t kj = at(first + j, b.kv_heads, hk);
          const std::int64_t vj = vat(first + j, b.kv_heads, hk);
          double dp = 0;
          for (int d = 0; d < Dv; ++d)
            dp += x(b.dout[oi + d]) * x(b.v[vj + d]);
          const double ds = score[j] * (dp - dsum);
          for (int d = 0; d < D; ++d) {
            r.dq[qi + d] += scale * ds * x(b.k[kj + d]);
            r.dk[kj + d] += scale * ds * x(b.q[qi + d]);
          }
          for (int d = 0; d < Dv; ++d)
            r.dv[vj + d] += score[j] * x(b.dout[oi + d]);
        }
      }
    }
  }
  return r;
}

//! Largest error of one output over the rank's rows, relative to the largest reference value
//! (absolute for the LSE), and whether every padding row holds exactly its defined value.
struct rank_errors {
  double o = 0, lse = 0, dq = 0, dk = 0, dv = 0;
  bool padding_ok = true;
  std::int64_t rows = 0; // real rows this rank checked
};

//! Runs forward and backward on `comm` (the CP group, rank = group rank) for batch b, outputs
//! poisoned first, padding rows of the inputs filled with random values (they must not matter).
template <class T, class C, class Policy = dcpp::host_attention>
rank_errors run_rank(C& comm, const batch<T>& b, const reference& ref, std::uint64_t seed,
                     Policy policy = {}) {
  const int cp = comm.size(), rank = comm.rank();
  const auto part = dcpp::ring_partition::padded(b.cu, cp, rank);
  const int H = b.heads, Hk = b.kv_heads, D = b.dim, Dv = b.vdim;
  const std::int64_t n = part.tokens();
  const auto qn = static_cast<std::size_t>(n * H * D), kn = static_cast<std::size_t>(n * Hk * D);
  const auto on = static_cast<std::size_t>(n * H * Dv), vn = static_cast<std::size_t>(n * Hk * Dv);
  std::vector<T> q(qn), k(kn), v(vn), dout(on);
  dcpp::partition_gather_on_host<T>(part, b.q, q, H * D);
  dcpp::partition_gather_on_host<T>(part, b.k, k, Hk * D);
  dcpp::partition_gather_on_host<T>(part, b.v, v, Hk * Dv);
  dcpp::partition_gather_on_host<T>(part, b.dout, dout, H * Dv);
  std::mt19937_64 rng(seed + static_cast<std::uint64_t>(rank));
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  const auto& src = part.source_rows();
  for (std::int64_t row = 0; row < n; ++row) {
    if (src[row] >= 0)
      continue;
    for (int e = 0; e < H * D; ++e)
      q[row * H * D + e] = dcpp::from_float<T>(u(rng));
    for (int e = 0; e < H * Dv; ++e)
      dout[row * H * Dv + e] = dcpp::from_float<T>(u(rng));
    for (int e = 0; e < Hk * D; ++e)
      k[row * Hk * D + e] = dcpp::from_float<T>(u(rng));
    for (int e = 0; e < Hk * Dv; ++e)
      v[row * Hk * Dv + e] = dcpp::from_float<T>(u(rng));
  }
  const T poison = dcpp::from_float<T>(77.0f);
  std::vector<T> o(on, poison), dq(qn, poison), dk(kn, poison), dv(vn, poison);
  std::vector<float> lse(static_cast<std::size_t>(n * H), std::numeric_limits<float>::quiet_NaN());
  dcpp::ring_attention_forward<C, T>(comm, part, b.shape(), q, k, v, o, lse, policy);
  dcpp::ring_attention_backward<C, T>(comm, part, b.shape(), q, k, v, o, lse, dout, dq, dk, dv,
                                      policy);

  rank_errors e;
  double max_o = 1e-30, max_dq = 1e-30, max_dk = 1e-30, max_dv = 1e-30;
  for (const double x : ref.o)
    max_o = std::max(max_o, std::abs(x));
  for (const double x : ref.dq)
    max_dq = std::max(max_dq, std::abs(x));
  for (const double x : ref.dk)
    max_dk = std::max(max_dk, std::abs(x));
  for (const double x : ref.dv)
    max_dv = std::max(max_dv, std::abs(x));
  auto diff = [](T got, double want) {
    const double g = dcpp::to_float(got);
    return std::isfinite(g) ? std::abs(g - want) : std::numeric_limits<double>::infinity();
  };
  for (std::int64_t row = 0; row < n; ++row) {
    const std::int64_t g = src[row];
    if (g < 0) {
      for (int c = 0; c < H * D; ++c)
        e.padding_ok &= dcpp::to_float(dq[row * H * D + c]) == 0.0f;
      for (int c = 0; c < H * Dv; ++c)
        e.padding_ok &= dcpp::to_float(o[row * H * Dv + c]) == 0.0f;
      for (int c = 0; c < Hk * D; ++c)
        e.padding_ok &= dcpp::to_float(dk[row * Hk * D + c]) == 0.0f;
      for (int c = 0; c < Hk * Dv; ++c)
        e.padding_ok &= dcpp::to_float(dv[row * Hk * Dv + c]) == 0.0f;
      for (int h = 0; h < H; ++h)
        e.padding_ok &= std::isinf(lse[row * H + h]) && lse[row * H + h] < 0;
      continue;
    }
    ++e.rows;
    for (int c = 0; c < H * D; ++c)
      e.dq = std::max(e.dq, diff(dq[row * H * D + c], ref.dq[g * H * D + c]) / max_dq);
    for (int c = 0; c < H * Dv; ++c)
      e.o = std::max(e.o, diff(o[row * H * Dv + c], ref.o[g * H * Dv + c]) / max_o);
    for (int c = 0; c < Hk * D; ++c)
      e.dk = std::max(e.dk, diff(dk[row * Hk * D + c], ref.dk[g * Hk * D + c]) / max_dk);
    for (int c = 0; c < Hk * Dv; ++c)
      e.dv = std::max(e.dv, diff(dv[row * Hk * Dv + c], ref.dv[g * Hk * Dv + c]) / max_dv);
    for (int h = 0; h < H; ++h) {
      const double l = lse[row * H + h];
      e.lse = std::max(e.lse, std::isfinite(l) ? std::abs(l - ref.lse[g * H + h])
                                               : std::numeric_limits<double>::infinity());
    }
  }
  return e;
}

//! Tolerances per input type (justified in docs/kernels.md): O and LSE are bounded by the
//! rounding of P to the input type before the PV product (fp32: accumulation order only);
//! gradients additionally by the rounding of dS, relative to the largest gradient.
template <class T>
struct tolerance;
template <>
struct tolerance<float> {
  static constexpr double o = 5e-6, lse = 1e-5, grad = 5e-6;
};
template <>
struct tolerance<dcpp::half> {
  static constexpr double o = 2e-3, lse = 1e-5, grad = 3e-3;
};
template <>
struct tolerance<dcpp::bfloat16> {
  static constexpr double o = 1.5e-2, lse = 1e-5, grad = 2.5e-2;
};

//! The tolerance checks of one rank's errors (doctest assertions; include support.hpp first).
template <class T>
void check_errors(const rank_errors& e) {
  CHECK(e.padding_ok);
  CHECK(e.o <= tolerance<T>::o);
  CHECK(e.lse <= tolerance<T>::lse);
  CHECK(e.dq <= tolerance<T>::grad);
  CHECK(e.dk <= tolerance<T>::grad);
  CHECK(e.dv <= tolerance<T>::grad);
}

} // namespace dcpp_test::attention
