// Seeded workload generators for tests, benchmarks and the demo: realistic length mixes.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string_view>
#include <vector>

namespace dcpp::workload {

//! splitmix64-seeded xoshiro256**: the same stream on every platform and standard library
//! (std::*_distribution are implementation-defined, so they are not used).
class rng {
public:
  explicit rng(std::uint64_t seed) {
    for (auto& s : state_) {
      seed += 0x9e3779b97f4a7c15ULL;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      s = z ^ (z >> 31);
    }
  }
  std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  //! uniform in [0, 1)
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  //! uniform integer in [lo, hi]
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) noexcept {
    return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  //! standard normal (Box-Muller)
  double normal() noexcept {
    const double u1 = 1.0 - uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::array<std::uint64_t, 4> state_{};
};

inline std::int64_t clamp_length(double x, std::int64_t lo, std::int64_t hi) {
  return std::clamp(static_cast<std::int64_t>(std::llround(x)), lo, hi);
}

//! SFT mix: log-normal with mean `mean` and sigma 1.5, clamped to [128, 8192].
inline std::vector<std::int64_t> sft_lognormal(std::size_t n, std::uint64_t seed,
                                               double mean = 1024.0, double sigma = 1.5,
                                               std::int64_t lo = 128, std::int64_t hi = 8192) {
  rng r(seed);
  const double mu = std::log(mean) - sigma * sigma / 2;
  std::vector<std::int64_t> out(n);
  for (auto& l : out)
    l = clamp_length(std::exp(mu + sigma * r.normal()), lo, hi);
  return out;
}

//! Long-context mix: most samples log-normal under 6K; `tail_fraction` (2.5%) log-normal with
//! median 24K up to `max_length` (128K).
inline std::vector<std::int64_t> long_tail(std::size_t n, std::uint64_t seed,
                                           double tail_fraction = 0.025,
                                           std::int64_t max_length = 131072) {
  rng r(seed);
  std::vector<std::int64_t> out(n);
  for (auto& l : out) {
    if (r.uniform() < tail_fraction)
      l = clamp_length(std::exp(std::log(24576.0) + 0.8 * r.normal()), 8192, max_length);
    else
      l = clamp_length(std::exp(std::log(1200.0) + 0.9 * r.normal()), 64, 6144);
  }
  return out;
}

//! Pareto heavy tail: x_min 512, shape `alpha`, capped at `max_length`.
inline std::vector<std::int64_t> pareto(std::size_t n, std::uint64_t seed, double alpha = 1.3,
                                        std::int64_t max_length = 131072) {
  rng r(seed);
  std::vector<std::int64_t> out(n);
  for (auto& l : out)
    l = clamp_length(512.0 / std::pow(1.0 - r.uniform(), 1.0 / alpha), 512, max_length);
  return out;
}

//! Bimodal: 7/8 short (uniform 256..2K), 1/8 long (log-normal, median 32K, up to `max_length`).
inline std::vector<std::int64_t> bimodal(std::size_t n, std::uint64_t seed,
                                         std::int64_t max_length = 65536) {
  rng r(seed);
  std::vector<std::int64_t> out(n);
  for (auto& l : out) {
    if (r.uniform() < 0.125)
      l = clamp_length(std::exp(std::log(32768.0) + 0.35 * r.normal()), 8192, max_length);
    else
      l = r.uniform_int(256, 2048);
  }
  return out;
}

//! RL rollouts: prompt (log-normal, median 600) plus response; 30% of responses hit the
//! generation cap, so lengths pile up at `cap`; the rest are uniform below it.
inline std::vector<std::int64_t> rl_rollouts(std::size_t n, std::uint64_t seed,
                                             std::int64_t cap = 32768) {
  rng r(seed);
  std::vector<std::int64_t> out(n);
  for (auto& l : out) {
    const std::int64_t prompt =
        clamp_length(std::exp(std::log(600.0) + 0.6 * r.normal()), 32, 4096);
    const std::int64_t response = r.uniform() < 0.3
                                      ? cap - prompt
                                      : r.uniform_int(16, std::max<std::int64_t>(16, cap - prompt));
    l = std::min(cap, prompt + std::max<std::int64_t>(16, response));
  }
  return out;
}

//! Short-only: uniform in [128, max_length].
inline std::vector<std::int64_t> short_only(std::size_t n, std::uint64_t seed,
                                            std::int64_t max_length = 4096) {
  rng r(seed);
  std::vector<std::int64_t> out(n);
  for (auto& l : out)
    l = r.uniform_int(128, max_length);
  return out;
}

//! Context extension: mostly short samples (log-normal, median 1,024, sigma 1, clamped to
//! [64, 16384]) with a share `long_share` (at least two samples) of long documents, log-uniform
//! in [max_length / 4, max_length]: the mix of a long-context extension run, whose long samples
//! come near the world's token capacity per micro-batch while the short ones fill the rest.
inline std::vector<std::int64_t> context_extension(std::size_t n, std::uint64_t seed,
                                                   std::int64_t max_length = 262144,
                                                   double long_share = 0.02) {
  rng r(seed);
  std::vector<std::int64_t> out(n);
  const auto longs = std::max<std::size_t>(std::min<std::size_t>(2, n),
                                           static_cast<std::size_t>(std::llround(long_share * n)));
  const double lo = std::log(static_cast<double>(std::max<std::int64_t>(1, max_length / 4)));
  const double hi = std::log(static_cast<double>(max_length));
  for (auto& l : out)
    l = clamp_length(std::exp(std::log(1024.0) + r.normal()), 64, 16384);
  // the long ones spread through the batch: one in each of `longs` equal stretches, at a
  // seeded place within it
  for (std::size_t k = 0; k < longs; ++k) {
    const std::size_t from = k * n / longs;
    const std::size_t to = (k + 1) * n / longs;
    const auto at =
        from + static_cast<std::size_t>(r.uniform_int(0, static_cast<std::int64_t>(to - from) - 1));
    out[at] = clamp_length(std::exp(lo + (hi - lo) * r.uniform()), 1, max_length);
  }
  return out;
}

} // namespace dcpp::workload
