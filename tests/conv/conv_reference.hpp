// fp64 reference of the causal depthwise conv1d on whole sequences, and the CP check shared by
// the local and MPI suites: a sample split in zigzag chunks over a group, halo exchanged through
// the communicator, gives the conv of the unsplit sequence.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dcpp/conv/conv1d.hpp"
#include "dcpp/core/float16.hpp"
#include "dcpp/route/route.hpp"

namespace dcpp_test::conv {

//! Unit roundoff of the storage type.
template <class T>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<T, dcpp::half>)
    return 0x1p-11;
  else if constexpr (std::is_same_v<T, dcpp::bfloat16>)
    return 0x1p-8;
  else
    return 0x1p-24;
}

//! A deterministic value in [-1, 1] for (sample, position, channel, salt), rounded to T.
template <class T>
T value_at(std::int64_t sample, std::int64_t position, std::int64_t channel, std::uint64_t salt) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(sample + 1) ^
                    0xc2b2ae3d27d4eb4fULL * static_cast<std::uint64_t>(position + 7) ^
                    0x165667b19e3779f9ULL * static_cast<std::uint64_t>(channel + 3) ^ salt;
  h ^= h >> 31;
  h *= 0xd6e8feb86659fd93ULL;
  h ^= h >> 32;
  const float v = static_cast<float>(static_cast<double>(h % 2000001) / 1000000.0 - 1.0);
  return dcpp::from_float<T>(v);
}

//! Reference forward and backward of one sequence (fp64 on the stored values), with the sums of
//! absolute terms that bound the rounding of each output.
struct reference {
  std::vector<double> y, y_scale, dx, dx_scale, dw, dw_scale, db, db_scale; // dw: [c, k]
};

template <class T>
reference reference_conv(const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& b,
                         const std::vector<T>& dy, std::int64_t length, int channels, int width,
                         bool silu) {
  reference r;
  const auto n = static_cast<std::size_t>(length * channels);
  r.y.resize(n), r.y_scale.resize(n), r.dx.assign(n, 0), r.dx_scale.assign(n, 0);
  r.dw.assign(static_cast<std::size_t>(channels * width), 0), r.dw_scale = r.dw;
  r.db.assign(static_cast<std::size_t>(channels), 0), r.db_scale = r.db;
  std::vector<double> g(n);
  auto X = [&](std::int64_t t, int c) {
    return t < 0
               ? 0.0
               : static_cast<double>(dcpp::to_float(x[static_cast<std::size_t>(t * channels + c)]));
  };
  for (std::int64_t t = 0; t < length; ++t)
    for (int c = 0; c < channels; ++c) {
      const auto at = static_cast<std::size_t>(t * channels + c);
      double pre = dcpp::to_float(b[static_cast<std::size_t>(c)]), scale = std::fabs(pre);
      for (int k = 0; k < width; ++k) {
        const double term =
            dcpp::to_float(w[static_cast<std::size_t>(c * width + k)]) * X(t - k, c);
        pre += term;
        scale += std::fabs(term);
      }
      const double s = 1.0 / (1.0 + std::exp(-pre));
      r.y[at] = silu ? pre * s : pre;
      r.y_scale[at] = scale;
      const double dyv = dcpp::to_float(dy[at]);
      g[at] = silu ? dyv * s * (1.0 + pre * (1.0 - s)) : dyv;
    }
  for (std::int64_t t = 0; t < length; ++t)
    for (int c = 0; c < channels; ++c) {
      const auto at = static_cast<std::size_t>(t * channels + c);
      // g carries the rounding of the pre-activation it was computed from: |dy| * pre's scale
      // bounds its absolute error (in units of fp32 roundoff) for both activations.
      auto g_scale = [&](std::size_t i) {
        return std::fabs(g[i]) + std::fabs(dcpp::to_float(dy[i])) * r.y_scale[i];
      };
      for (int k = 0; k < width && t + k < length; ++k) {
        const auto i = static_cast<std::size_t>((t + k) * channels + c);
        const double wk = dcpp::to_float(w[static_cast<std::size_t>(c * width + k)]);
        r.dx[at] += wk * g[i];
        r.dx_scale[at] += std::fabs(wk) * g_scale(i);
      }
      for (int k = 0; k < width; ++k) {
        r.dw[static_cast<std::size_t>(c * width + k)] += g[at] * X(t - k, c);
        r.dw_scale[static_cast<std::size_t>(c * width + k)] += g_scale(at) * std::fabs(X(t - k, c));
      }
      r.db[static_cast<std::size_t>(c)] += g[at];
      r.db_scale[static_cast<std::size_t>(c)] += g_scale(at);
    }
  return r;
}

inline void expect(bool condition, const std::string& what) {
  if (!condition)
    throw std::runtime_error("conv1d: " + what);
}

//! Output bound: rounding to T, plus fp32 arithmetic (a few ulps of every term; SiLU's exp and
//! derivative add a few more), relative to the sum of absolute terms.
//! Results below the smallest normal of T round to its subnormal grid: half of that spacing is
//! an absolute error no relative bound covers (2^-25 for binary16; negligible for the others).
template <class T>
double tolerance(double value, double scale) {
  const double subnormal_half_spacing = std::is_same_v<T, dcpp::half> ? 0x1p-25 : 0x1p-150;
  return unit_roundoff<T>() * std::fabs(value) + 64 * 0x1p-24 * (scale + std::fabs(value)) +
         subnormal_half_spacing;
}

//! The CP check on `group` (every rank of it calls this): samples split in zigzag chunks over the
//! group, halo exchanged, forward and backward compared with the fp64 reference of each unsplit
//! sample; dw and db summed over the group. Throws on a mismatch.
template <dcpp::communicator C, class T>
void check_cp(C& group, const std::vector<std::int64_t>& lengths, int channels, int width,
              bool silu, std::uint64_t salt) {
  const int cp = group.size();
  // One micro-batch, one group of all ranks, every sample in it.
  dcpp::plan p;
  p.world_size = cp;
  p.max_tokens_per_rank = 1 << 30;
  p.lengths = lengths;
  p.microbatches.push_back({{{0, cp, {}}}});
  for (std::size_t s = 0; s < lengths.size(); ++s)
    p.microbatches[0].groups[0].samples.push_back(static_cast<std::int32_t>(s));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(cp), 0);
  counts[0] = static_cast<std::int64_t>(lengths.size());
  const auto origins = dcpp::sample_origins::from_counts(counts, lengths);
  const auto route = dcpp::make_rank_route(p, origins, 0, group.rank());
  const dcpp::thd_layout& t = route.layout;
  const std::int64_t tokens = t.tokens();

  std::vector<T> w(static_cast<std::size_t>(channels * width)),
      b(static_cast<std::size_t>(channels));
  for (int c = 0; c < channels; ++c) {
    for (int k = 0; k < width; ++k)
      w[static_cast<std::size_t>(c * width + k)] = value_at<T>(-1, k, c, salt);
    b[static_cast<std::size_t>(c)] = value_at<T>(-2, 0, c, salt);
  }
  // This rank's rows: real tokens from (sample, position); padding rows hold garbage on purpose.
  std::vector<T> x(static_cast<std::size_t>(tokens * channels)), dy(x.size());
  std::vector<std::int64_t> sample_of(static_cast<std::size_t>(tokens)),
      position_of(sample_of.size());
  for (std::size_t i = 0; i + 1 < t.cu_seqlens_padded.size(); ++i) {
    const std::int64_t padded = t.cu_seqlens_padded[i + 1] - t.cu_seqlens_padded[i];
    const std::int64_t base = t.cu_seqlens_padded[i] / cp;
    for (std::int64_t j = 0; j < padded / cp; ++j) {
      const std::int64_t pos = dcpp::zigzag_position(padded, cp, t.rank_in_group, j);
      const auto row = static_cast<std::size_t>(base + j);
      sample_of[row] = t.samples[i];
      position_of[row] = pos;
      const bool real = pos < lengths[static_cast<std::size_t>(t.samples[i])];
      for (int c = 0; c < channels; ++c) {
        x[row * static_cast<std::size_t>(channels) + static_cast<std::size_t>(c)] =
            real ? value_at<T>(t.samples[i], pos, c, salt) : dcpp::from_float<T>(1000.0f);
        dy[row * static_cast<std::size_t>(channels) + static_cast<std::size_t>(c)] =
            real ? value_at<T>(t.samples[i], pos, c, salt ^ 0x5555) : dcpp::from_float<T>(-1000.0f);
      }
    }
  }
  const dcpp::conv1d_layout layout = dcpp::conv1d_layout::from_thd(t, width);
  const auto halo_plan = dcpp::conv1d_halo_plan::make(t, width);
  const std::vector<T> halo =
      dcpp::exchange_halo(group, halo_plan, std::span<const T>(x), channels);
  std::vector<T> y(x.size(), dcpp::from_float<T>(77.0f)), dx(x.size(), dcpp::from_float<T>(77.0f));
  std::vector<float> halo_dx(static_cast<std::size_t>(layout.halo_rows * channels), 77.0f),
      dw(static_cast<std::size_t>(channels * width)), db(static_cast<std::size_t>(channels));
  dcpp::kernels::conv1d_params<T> params;
  params.x = x.data();
  params.weight = w.data();
  params.bias = b.data();
  params.halo_x = halo.data();
  params.y = y.data();
  params.dy = dy.data();
  params.dx = dx.data();
  params.halo_dx = halo_dx.data();
  params.dweight = dw.data();
  params.dbias = db.data();
  params.tokens = tokens;
  params.channels = channels;
  params.silu = silu;
  dcpp::conv1d_forward_on_host(width, params, layout);
  dcpp::conv1d_halo_gradients_on_host(width, params, layout);
  const auto incoming =
      dcpp::collect_halo_gradients(group, halo_plan, std::span<const float>(halo_dx), channels);
  dcpp::conv1d_backward_on_host(width, params, layout, &incoming);
  group.all_reduce(std::span<float>(dw), dcpp::reduce_op::sum);
  group.all_reduce(std::span<float>(db), dcpp::reduce_op::sum);

  std::vector<double> dw_ref(dw.size(), 0), dw_scale(dw.size(), 0), db_ref(db.size(), 0),
      db_scale(db.size(), 0);
  std::vector<reference> refs;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    const std::int64_t length = lengths[s];
    std::vector<T> xs(static_cast<std::size_t>(length * channels)), dys(xs.size());
    for (std::int64_t q = 0; q < length; ++q)
      for (int c = 0; c < channels; ++c) {
        xs[static_cast<std::size_t>(q * channels + c)] =
            value_at<T>(static_cast<std::int64_t>(s), q, c, salt);
        dys[static_cast<std::size_t>(q * channels + c)] =
            value_at<T>(static_cast<std::int64_t>(s), q, c, salt ^ 0x5555);
      }
    refs.push_back(reference_conv(xs, w, b, dys, length, channels, width, silu));
    for (std::size_t k = 0; k < dw.size(); ++k) {
      dw_ref[k] += refs.back().dw[k];
      dw_scale[k] += refs.back().dw_scale[k];
    }
    for (std::size_t c = 0; c < db.size(); ++c) {
      db_ref[c] += refs.back().db[c];
      db_scale[c] += refs.back().db_scale[c];
    }
  }
  for (std::int64_t row = 0; row < tokens; ++row) {
    const auto s = static_cast<std::size_t>(sample_of[static_cast<std::size_t>(row)]);
    const std::int64_t pos = position_of[static_cast<std::size_t>(row)];
    for (int c = 0; c < channels; ++c) {
      const auto at = static_cast<std::size_t>(row * channels + c);
      const double got_y = dcpp::to_float(y[at]), got_dx = dcpp::to_float(dx[at]);
      if (pos >= lengths[s]) {
        expect(got_y == 0.0 && got_dx == 0.0,
               fmt::format("padding row {} (sample {}, position {}) is not zero", row, s, pos));
        continue;
      }
      const auto ref_at = static_cast<std::size_t>(pos * channels + c);
      const reference& r = refs[s];
      expect(std::fabs(got_y - r.y[ref_at]) <= tolerance<T>(r.y[ref_at], r.y_scale[ref_at]),
             fmt::format("cp {} rank {}: y of sample {} position {} channel {}: {} vs {}", cp,
                         group.rank(), s, pos, c, got_y, r.y[ref_at]));
      // The taps into the next chunk arrive from its owner and are added before the one
      // rounding: the same bound as without CP.
      expect(std::fabs(got_dx - r.dx[ref_at]) <= tolerance<T>(r.dx[ref_at], r.dx_scale[ref_at]),
             fmt::format("cp {} rank {}: dx of sample {} position {} channel {}: {} vs {}", cp,
                         group.rank(), s, pos, c, got_dx, r.dx[ref_at]));
    }
  }
  std::int64_t total = 0;
  for (auto l : lengths)
    total += l;
  const double sum_bound = (static_cast<double>(total) / 64.0 + 32.0) * 0x1p-24 * 4;
  for (std::size_t k = 0; k < dw.size(); ++k)
    expect(std::fabs(dw[k] - dw_ref[k]) <= sum_bound * dw_scale[k] + 1e-30,
           fmt::format("cp {}: dw[{}] = {} vs {}", cp, k, dw[k], dw_ref[k]));
  for (std::size_t c = 0; c < db.size(); ++c)
    expect(std::fabs(db[c] - db_ref[c]) <= sum_bound * db_scale[c] + 1e-30,
           fmt::format("cp {}: db[{}] = {} vs {}", cp, c, db[c], db_ref[c]));
}

} // namespace dcpp_test::conv
