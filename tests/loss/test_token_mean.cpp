// Tests for kernels/dcpp/kernels/loss/token_reduce.hpp (run through the host launcher) and
// include/dcpp/loss/token_mean.hpp: against an fp64 reference, and the exact global mean over a
// routed dynamic-CP plan where averaging per-rank means is wrong.
#include "../support.hpp"

#include <cmath>
#include <cstdint>
#include <mutex>
#include <random>
#include <span>
#include <vector>

#include "../route/round_trip.hpp"
#include "dcpp/comm/local.hpp"
#include "dcpp/core/float16.hpp"
#include "dcpp/loss/token_mean.hpp"

namespace {

template <class Loss, class Acc>
void check_against_reference(std::uint64_t seed, int heads, bool per_head_mask) {
  std::mt19937_64 rng(seed);
  // Awkward lengths: empty, single-token, one over a block, long, and a padding tail segment.
  std::vector<std::int32_t> cu{0};
  for (int len : {0, 1, 257, 3, 1000, 31, 0, 513})
    cu.push_back(cu.back() + len + static_cast<int>(rng() % 3));
  const int sequences = static_cast<int>(cu.size()) - 1;
  const std::int64_t tokens = cu.back() + 5; // unused tail after the last sequence
  std::vector<Loss> losses(static_cast<std::size_t>(tokens * heads));
  std::vector<double> exact(losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) {
    losses[i] = dcpp::from_float<Loss>(std::uniform_real_distribution<float>(0.01f, 9.0f)(rng));
    exact[i] = dcpp::to_float(losses[i]); // the kernel sums the stored values
  }
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(per_head_mask ? tokens * heads : tokens));
  for (auto& m : mask)
    m = rng() % 4 != 0 ? 1 : 0;
  std::vector<Acc> sums(static_cast<std::size_t>(sequences * heads), Acc(-7)),
      totals(2 * static_cast<std::size_t>(heads), Acc(-7));
  std::vector<std::int64_t> counts(sums.size(), -7);
  dcpp::kernels::token_reduce_params<Loss, Acc> p;
  p.losses = losses.data();
  p.loss_head_stride = tokens;
  p.mask = mask.data();
  p.mask_head_stride = per_head_mask ? tokens : 0;
  p.cu_seqlens = cu.data();
  p.sequences = sequences;
  p.heads = heads;
  p.sums = sums.data();
  p.counts = counts.data();
  p.totals = totals.data();
  dcpp::token_reduce_on_host(p, tokens, {.workers = 2});

  for (int h = 0; h < heads; ++h) {
    double head_sum = 0, head_abs = 0;
    std::int64_t head_count = 0;
    for (int s = 0; s < sequences; ++s) {
      double sum = 0;
      std::int64_t count = 0;
      for (std::int64_t t = cu[static_cast<std::size_t>(s)];
           t < cu[static_cast<std::size_t>(s) + 1]; ++t)
        if (mask[static_cast<std::size_t>((per_head_mask ? h * tokens : 0) + t)] != 0) {
          sum += exact[static_cast<std::size_t>(h * tokens + t)];
          ++count;
        }
      const std::size_t at = static_cast<std::size_t>(s * heads + h);
      CHECK(counts[at] == count);
      // Values are positive, so sum|x| = sum. Each thread adds ~len/256 terms, then a 5+5-level
      // butterfly: error <= (len/256 + 10) * eps(Acc) * sum.
      const double len = cu[static_cast<std::size_t>(s) + 1] - cu[static_cast<std::size_t>(s)];
      const double eps = std::numeric_limits<Acc>::epsilon();
      CHECK(std::fabs(static_cast<double>(sums[at]) - sum) <= (len / 256 + 10) * eps * sum);
      head_sum += sum;
      head_count += count;
      head_abs += sum;
    }
    CHECK(static_cast<std::int64_t>(totals[static_cast<std::size_t>(heads + h)]) == head_count);
    const double eps = std::numeric_limits<Acc>::epsilon();
    CHECK(std::fabs(static_cast<double>(totals[static_cast<std::size_t>(h)]) - head_sum) <=
          (sequences / 256.0 + 20 + 1000.0 / 256) * eps * head_abs);
  }
}

} // namespace

TEST_CASE("token_reduce: matches the fp64 reference for every loss and accumulator type") {
  for (std::uint64_t seed = 0; seed < 6; ++seed)
    for (int heads : {1, 3}) {
      const bool per_head = seed % 2 == 1;
      check_against_reference<float, double>(seed, heads, per_head);
      check_against_reference<float, float>(seed, heads, per_head);
      check_against_reference<dcpp::half, float>(seed, heads, per_head);
      check_against_reference<dcpp::bfloat16, double>(seed, heads, per_head);
      check_against_reference<dcpp::bfloat16, float>(seed, heads, per_head);
    }
}

TEST_CASE("token_reduce: bad inputs name the field, value and limit") {
  std::vector<float> losses(10, 1.0f);
  std::vector<std::uint8_t> mask(10, 1);
  std::vector<std::int32_t> cu{0, 6, 4};
  std::vector<double> sums(2), totals(2);
  std::vector<std::int64_t> counts(2);
  dcpp::kernels::token_reduce_params<float, double> p{
      losses.data(), 10,           mask.data(), 0, cu.data(), 2, 1, sums.data(),
      counts.data(), totals.data()};
  CHECK(dcpp::check_token_reduce(p, 10).message ==
        "token_reduce: cu_seqlens[2] = 4 is below cu_seqlens[1] = 6");
  cu = {0, 6, 12};
  CHECK(dcpp::check_token_reduce(p, 10).message ==
        "token_reduce: cu_seqlens[2] = 12 exceeds the 10 tokens of the buffer");
  p.heads = 0;
  CHECK_THROWS_WITH_AS(dcpp::token_reduce_on_host(p, 12),
                       "token_reduce: heads = 0 must be in [1, 65535]", dcpp::error);
}

TEST_CASE("global_token_mean: exact on a dynamic-CP plan where per-rank averaging is wrong") {
  // Per-token losses are a function of (sample, position), so every layout sees the same values.
  auto loss_of = [](std::int64_t sample, std::int64_t position, int head) {
    return 0.5 +
           std::fmod(static_cast<double>(sample * 7919 + position * 104729 + head * 13), 97.0) /
               13.0;
  };
  for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    const int world = 4 + static_cast<int>(seed % 3) * 2; // 4, 6, 8 ranks
    const auto w = dcpp_test::route::make_workload(seed, world);
    // Single-rank reference: every real token with its loss mask, head 1 skips the last token of
    // each sample (a multi-token-prediction head has no target there).
    double reference_sum[2] = {0, 0};
    std::int64_t reference_count[2] = {0, 0};
    std::vector<std::vector<std::uint8_t>> masks;
    {
      std::int64_t s = 0;
      for (int r = 0; r < world; ++r) {
        const auto shard = dcpp_test::route::make_shard(w, r, seed);
        std::int64_t at = 0;
        for (const auto length : shard.lengths) {
          for (std::int64_t t = 0; t < length; ++t, ++at)
            for (int h = 0; h < 2; ++h)
              if (shard.get<dcpp::fields::loss_mask>()[static_cast<std::size_t>(at)] != 0 &&
                  (h == 0 || t + 1 < length)) {
                reference_sum[h] += static_cast<float>(loss_of(s, t, h)); // stored as fp32
                ++reference_count[h];
              }
          ++s;
        }
      }
    }
    std::mutex m;
    std::vector<double> naive_means; // mean of each (rank, micro-batch) buffer, head 0
    std::vector<dcpp::token_mean> results(static_cast<std::size_t>(world));
    dcpp::run_local(world, [&](dcpp::local_communicator& c) {
      const auto shard = dcpp_test::route::make_shard(w, c.rank(), seed);
      dcpp::planner<dcpp::length_squared_cost> planner(w.options);
      auto router = dcpp::plan_step(planner, c, shard);
      std::vector<double> totals(4, 0.0);
      for (std::size_t mb = 0; mb < router.microbatches(); ++mb) {
        const auto b = router.dispatch(mb, shard);
        const std::int64_t tokens = b.tokens();
        std::vector<float> losses(static_cast<std::size_t>(2 * tokens), 123.0f);
        std::vector<std::uint8_t> mask(static_cast<std::size_t>(2 * tokens), 0);
        for (std::size_t i = 0; i + 1 < b.layout.cu_seqlens.size(); ++i) {
          const std::int64_t base = b.layout.cu_seqlens_padded[i] / b.layout.cp;
          const std::int64_t local =
              (b.layout.cu_seqlens_padded[i + 1] - b.layout.cu_seqlens_padded[i]) / b.layout.cp;
          const std::int64_t length = b.layout.cu_seqlens[i + 1] - b.layout.cu_seqlens[i];
          for (std::int64_t j = base; j < base + local; ++j) {
            const auto at = static_cast<std::size_t>(j);
            const std::int64_t position = b.position_ids[at];
            for (int h = 0; h < 2; ++h) {
              const auto k = static_cast<std::size_t>(h * tokens + j);
              losses[k] = static_cast<float>(loss_of(b.layout.samples[i], position, h));
              mask[k] =
                  b.get<dcpp::fields::loss_mask>()[at] != 0 && (h == 0 || position + 1 < length);
            }
          }
        }
        // The kernel's cu_seqlens are local offsets: cu_seqlens_padded / cp.
        std::vector<std::int32_t> cu;
        for (const auto x : b.layout.cu_seqlens_padded)
          cu.push_back(b.layout.cp > 0 ? x / b.layout.cp : 0);
        const int sequences = static_cast<int>(cu.size()) - 1;
        std::vector<double> sums(static_cast<std::size_t>(std::max(sequences, 0) * 2) + 1),
            local_totals(4);
        std::vector<std::int64_t> counts(sums.size());
        dcpp::kernels::token_reduce_params<float, double> p{
            losses.data(), tokens, mask.data(), tokens,        cu.data(),
            sequences,     2,      sums.data(), counts.data(), local_totals.data()};
        dcpp::token_reduce_on_host(p, tokens);
        for (std::size_t k = 0; k < 4; ++k)
          totals[k] += local_totals[k];
        if (local_totals[2] > 0) {
          std::lock_guard lock(m);
          naive_means.push_back(local_totals[0] / local_totals[2]);
        }
      }
      results[static_cast<std::size_t>(c.rank())] =
          dcpp::global_token_mean(c, std::span<const double>(totals), 2);
    });
    for (int h = 0; h < 2; ++h) {
      const double exact = reference_sum[h] / static_cast<double>(reference_count[h]);
      for (const auto& r : results) {
        CHECK(r.counts[static_cast<std::size_t>(h)] == reference_count[h]); // no token twice
        CHECK(r.mean[static_cast<std::size_t>(h)] == doctest::Approx(exact).epsilon(1e-12));
        CHECK(r.gradient_scale[static_cast<std::size_t>(h)] ==
              1.0 / static_cast<double>(reference_count[h]));
      }
    }
    // Dividing per rank and micro-batch and then averaging weights every buffer equally,
    // whatever its token count: off by far more than rounding.
    double naive = 0;
    for (const double x : naive_means)
      naive += x;
    naive /= static_cast<double>(naive_means.size());
    const double exact = reference_sum[0] / static_cast<double>(reference_count[0]);
    CHECK(std::fabs(naive - exact) > 1e-4 * exact);
  }
}
