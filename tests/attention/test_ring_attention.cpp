// Tests for THD ring attention: the partition helpers against a direct zigzag computation, and
// the ring (kernels' own source through the host launcher, local backend) against fp64 dense
// causal attention for cp 1/2/4/8, each input type, GQA/MQA, head dims 64, 96, 128, 192, 256 and
// MLA's 192 (Q/K) with 128 (V).
#include "../support.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "attention_reference.hpp"
#include "dcpp/comm/local.hpp"

namespace {

using namespace dcpp_test::attention;

const std::vector<int> mixed_lengths = {1, 2, 17, 64, 65, 100, 131, 3};

//! CI's sanitizer build (-O0, ASan, UBSan) runs the host launcher some 30x slower and sets
//! DCPP_TESTS_QUICK: it then runs a corner of the numeric matrix (every code path: cp 1 and 4,
//! GQA, both head dims, every type); the full matrix runs in the normal build.
using dcpp_test::quick;

template <class T>
void check_ring(int cp, int heads, int kv_heads, int dim, std::uint64_t seed,
                const std::vector<int>& lengths = mixed_lengths, int vdim = 0) {
  const auto b = make_batch<T>(seed, lengths, heads, kv_heads, dim, vdim);
  const auto ref = attend(b);
  std::vector<rank_errors> errors(static_cast<std::size_t>(cp));
  dcpp::run_local(cp, [&](dcpp::local_communicator& comm) {
    errors[static_cast<std::size_t>(comm.rank())] = run_rank<T>(comm, b, ref, seed);
  });
  std::int64_t rows = 0;
  for (const auto& e : errors) {
    INFO(fmt::format("cp {} heads {}/{} dim {}/{}: o {:.2e} lse {:.2e} dq {:.2e} dk {:.2e} dv "
                     "{:.2e}",
                     cp, heads, kv_heads, dim, b.vdim, e.o, e.lse, e.dq, e.dk, e.dv));
    check_errors<T>(e);
    rows += e.rows;
  }
  CHECK(rows == b.tokens()); // every real row checked exactly once over the group
}

//! A user's per-step policy written without dcpp's kernels (plain loops, fp64 inside): the ring,
//! merge and backward ring of dcpp must give the same attention with it.
struct loop_policy {
  int forward_calls = 0, backward_calls = 0;

  template <class T>
  static bool visible(const dcpp::attention_step<T>& s, int seq, int i, int j) {
    const auto& l = s.params.layout;
    const int len = l.offset[seq + 1] - l.offset[seq], c = len / 2;
    const auto real = [c, seq](const std::int32_t* r, int x) {
      return x < c ? x < r[2 * seq] : x - c < r[2 * seq + 1];
    };
    switch (s.params.kind) {
    case dcpp::kernels::ring_step_kind::diagonal:
      if (j > i)
        return false;
      break;
    case dcpp::kernels::ring_step_kind::lower:
      if (j >= c)
        return false;
      break;
    case dcpp::kernels::ring_step_kind::upper:
      if (i < c)
        return false;
      break;
    }
    return real(l.q_real, i) && real(l.kv_real, j);
  }
  template <class T, class F>
  static void each_pair(const dcpp::attention_step<T>& s, F&& f) {
    const auto& p = s.params;
    const int D = s.shape.head_dim, G = p.heads / p.kv_heads;
    for (int seq = 0; seq < p.layout.sequences; ++seq) {
      const int base = p.layout.offset[seq], len = p.layout.offset[seq + 1] - base;
      for (int h = 0; h < p.heads; ++h)
        for (int i = 0; i < len; ++i) {
          const bool step_row = p.kind != dcpp::kernels::ring_step_kind::upper || i >= len / 2;
          std::vector<std::pair<std::int64_t, double>> keys; // (K/V offset, score)
          for (int j = 0; j < len; ++j)
            if (visible(s, seq, i, j)) {
              const std::int64_t kq =
                  (static_cast<std::int64_t>(base + j) * p.kv_heads + h / G) * D;
              double dot = 0;
              for (int d = 0; d < D; ++d)
                dot += static_cast<double>(dcpp::to_float(
                           p.q[(static_cast<std::int64_t>(base + i) * p.heads + h) * D + d])) *
                       dcpp::to_float(p.k[kq + d]);
              keys.emplace_back(kq, dot * p.scale);
            }
          f(static_cast<std::int64_t>(base + i) * p.heads + h, step_row, keys);
        }
    }
  }

  template <class T>
  void forward_step(const dcpp::attention_step<T>& s) {
    ++forward_calls;
    const int D = s.shape.head_dim;
    each_pair(s, [&](std::int64_t row, bool step_row, const auto& keys) {
      if (!step_row)
        return;
      double mx = -INFINITY, sum = 0;
      for (const auto& k : keys)
        mx = std::max(mx, k.second);
      std::vector<double> o(static_cast<std::size_t>(D), 0.0);
      for (const auto& [kv, score] : keys) {
        const double w = std::exp(score - mx);
        sum += w;
        for (int d = 0; d < D; ++d)
          o[d] += w * dcpp::to_float(s.params.v[kv + d]);
      }
      for (int d = 0; d < D; ++d)
        s.params.o[row * D + d] = keys.empty() ? 0.0f : static_cast<float>(o[d] / sum);
      s.params.lse[row] = keys.empty() ? -INFINITY : static_cast<float>(mx + std::log(sum));
    });
  }

  template <class T>
  void backward_step(const dcpp::attention_step<T>& s) {
    ++backward_calls;
    const int D = s.shape.head_dim;
    const auto& p = s.params;
    each_pair(s, [&](std::int64_t row, bool step_row, const auto& keys) {
      if (!step_row)
        return;
      for (const auto& [kv, score] : keys) {
        const double prob = std::exp(score - p.lse_final[row]);
        double dp = 0;
        for (int d = 0; d < D; ++d)
          dp += static_cast<double>(dcpp::to_float(p.dout[row * D + d])) *
                dcpp::to_float(p.v[kv + d]);
        const double ds = prob * (dp - p.dsum[row]);
        for (int d = 0; d < D; ++d) {
          p.dq[row * D + d] += static_cast<float>(p.scale * ds * dcpp::to_float(p.k[kv + d]));
          p.dk[kv + d] += static_cast<float>(p.scale * ds * dcpp::to_float(p.q[row * D + d]));
          p.dv[kv + d] += static_cast<float>(prob * dcpp::to_float(p.dout[row * D + d]));
        }
      }
    });
  }
};

} // namespace

TEST_CASE("ring attention: a user's attention policy plugs into the ring") {
  static_assert(dcpp::attention_policy<loop_policy, float>);
  for (const int cp : {1, 2, 4}) {
    const auto b = make_batch<float>(900 + cp, {1, 2, 17, 40, 3}, 4, 2, 64);
    const auto ref = attend(b);
    std::vector<rank_errors> errors(static_cast<std::size_t>(cp));
    std::vector<int> calls(static_cast<std::size_t>(cp));
    dcpp::run_local(cp, [&](dcpp::local_communicator& comm) {
      loop_policy policy;
      errors[comm.rank()] =
          run_rank<float, dcpp::local_communicator, loop_policy&>(comm, b, ref, 9, policy);
      calls[comm.rank()] = policy.forward_calls + policy.backward_calls;
    });
    for (int r = 0; r < cp; ++r) {
      const auto& e = errors[static_cast<std::size_t>(r)];
      check_errors<float>(e);
      CHECK(calls[static_cast<std::size_t>(r)] == 2 * cp); // one forward and one backward per step
    }
  }
}

//! dcpp's kernels without the fused-merge promise: the ring runs its separate merge kernel.
struct unfused_policy {
  dcpp::host_attention kernels;
  template <class T>
  void forward_step(const dcpp::attention_step<T>& s) {
    CHECK_FALSE(s.params.merge);
    kernels.forward_step(s);
  }
  template <class T>
  void backward_step(const dcpp::attention_step<T>& s) {
    kernels.backward_step(s);
  }
};

TEST_CASE_TEMPLATE("ring attention: the merge fused into the forward and the separate merge agree",
                   T, float, dcpp::bfloat16) {
  static_assert(dcpp::attention_fuses_merge<dcpp::host_attention>);
  static_assert(!dcpp::attention_fuses_merge<unfused_policy>);
  const auto b = make_batch<T>(700, {1, 17, 65, 130, 3}, 4, 2, 64);
  const auto ref = attend(b);
  // the sanitizer build (DCPP_TESTS_QUICK) runs cp 4
  for (const int cp : quick() ? std::vector<int>{4} : std::vector<int>{2, 4}) {
    std::vector<rank_errors> errors(static_cast<std::size_t>(cp));
    dcpp::run_local(cp, [&](dcpp::local_communicator& comm) {
      errors[static_cast<std::size_t>(comm.rank())] =
          run_rank<T, dcpp::local_communicator, unfused_policy>(comm, b, ref, 70);
    });
    for (const auto& e : errors)
      check_errors<T>(e);
  }
}

TEST_CASE_TEMPLATE("ring attention equals fp64 causal attention", T, float, dcpp::half,
                   dcpp::bfloat16) {
  if (quick()) {
    check_ring<T>(1, 4, 4, 64, 101, {1, 17, 65, 3});
    check_ring<T>(4, 4, 2, 64, 204, {1, 17, 65, 3}); // GQA
    return;
  }
  for (const int cp : {1, 2, 4, 8}) {
    check_ring<T>(cp, 4, 4, 64, 100 + cp);
    check_ring<T>(cp, 4, 2, 64, 200 + cp); // GQA
  }
}

TEST_CASE_TEMPLATE("ring attention: head dim 128, MQA, one-token and tile-edge samples", T, float,
                   dcpp::half, dcpp::bfloat16) {
  check_ring<T>(2, 2, 1, 128, 300, {1, 33, 95, 64, 1, 7}); // MQA, head dim 128
  if (quick())
    return;
  check_ring<T>(4, 3, 1, 64, 400, {1, 1, 8, 9, 127, 129}); // MQA with 3 query heads
  check_ring<T>(8, 2, 2, 128, 500, {16, 2, 200});          // chunks of 1 and 13 tokens
}

TEST_CASE_TEMPLATE("ring attention: head dims 96, 192, 256 and MLA's 192/128, with GQA", T, float,
                   dcpp::half, dcpp::bfloat16) {
  // (Q/K head dim, V head dim): every shape beside 64 and 128 that the kernels take; lengths
  // cross the 64-row blocks and the 32-key inner tiles of the wide shapes
  const std::vector<int> lengths = {1, 33, 70, 5, 130};
  if (quick()) {
    check_ring<T>(2, 4, 2, 192, 610, {1, 33, 70}, 128); // MLA, GQA
    return;
  }
  for (const int cp : {1, 2, 4, 8}) {
    check_ring<T>(cp, 4, 2, 96, 600 + cp, lengths);
    check_ring<T>(cp, 4, 2, 192, 610 + cp, lengths, 128); // MLA
  }
  check_ring<T>(2, 2, 1, 192, 620, lengths);        // MQA, 192 for Q, K and V
  check_ring<T>(4, 4, 2, 256, 630, {1, 40, 97, 3}); // head dim 256, GQA
  check_ring<T>(1, 2, 2, 256, 640, {129, 2});
}

TEST_CASE("ring attention: partition geometry against a direct zigzag walk") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int cp = 1 << (rng() % 4);
    std::vector<std::int32_t> cu{0};
    const int n = 1 + static_cast<int>(rng() % 7);
    for (int s = 0; s < n; ++s)
      cu.push_back(cu.back() + static_cast<std::int32_t>(rng() % 90));
    std::vector<int> seen(static_cast<std::size_t>(cu.back()), 0);
    for (int rank = 0; rank < cp; ++rank) {
      const auto part = dcpp::ring_partition::padded(cu, cp, rank);
      REQUIRE(part.tokens() * cp == part.cu_seqlens_padded().back());
      for (int s = 0; s < n; ++s) {
        const int padded = part.cu_seqlens_padded()[s + 1] - part.cu_seqlens_padded()[s];
        const int real = cu[s + 1] - cu[s];
        CHECK(padded % (2 * cp) == 0);
        CHECK(padded >= real);
        CHECK(padded < real + 2 * cp);
        const int chunk = padded / (2 * cp);
        for (int j = 0; j < 2 * chunk; ++j) {
          // chunk r then chunk 2cp-1-r, written out here without the zigzag helpers
          const int pos = j < chunk ? rank * chunk + j : (2 * cp - 1 - rank) * chunk + (j - chunk);
          const auto row = static_cast<std::size_t>(part.offsets()[s] + j);
          CHECK(part.padded_rows()[row] == part.cu_seqlens_padded()[s] + pos);
          if (pos < real) {
            CHECK(part.source_rows()[row] == cu[s] + pos);
            ++seen[static_cast<std::size_t>(cu[s] + pos)];
          } else {
            CHECK(part.source_rows()[row] == -1);
          }
          // the real-row counts of the halves agree with the per-row view
          const int half = j < chunk ? 0 : 1;
          const bool real_row = j - half * chunk < part.own_real()[2 * s + half];
          CHECK(real_row == (pos < real));
        }
      }
      CHECK(part.real_of(rank) == part.own_real());
    }
    for (const int c : seen)
      CHECK(c == 1); // every real token on exactly one rank
  }
}

TEST_CASE("ring attention: a partition from a router layout") {
  dcpp::thd_layout t;
  t.first_rank = 4, t.cp = 2, t.rank_in_group = 1;
  t.samples = {7, 3};
  t.cu_seqlens = {0, 5, 9};
  t.cu_seqlens_padded = {0, 8, 12};
  const auto a = dcpp::ring_partition::from(t);
  const dcpp::ring_partition b({0, 5, 9}, {0, 8, 12}, 2, 1);
  CHECK(a.tokens() == t.tokens());
  CHECK(a.offsets() == b.offsets());
  CHECK(a.own_real() == b.own_real());
  CHECK(a.source_rows() == b.source_rows());
  // sample 0: chunks of 2; rank 1 holds chunks 1 (positions 2, 3) and 2 (positions 4, 5 of 5)
  CHECK(a.own_real() == std::vector<std::int32_t>{2, 1, 1, 1}); // sample 1: chunks of 1, both real
  CHECK_THROWS_WITH(dcpp::ring_partition::from(dcpp::thd_layout{}),
                    "ring attention: the rank is idle in this micro-batch");
}

TEST_CASE("ring attention: gather and scatter round trip") {
  const std::vector<std::int32_t> cu{0, 1, 6, 6, 40};
  std::vector<float> full(static_cast<std::size_t>(cu.back()) * 3);
  for (std::size_t i = 0; i < full.size(); ++i)
    full[i] = static_cast<float>(i) + 0.5f;
  std::vector<float> back(full.size(), -1.0f);
  for (int rank = 0; rank < 4; ++rank) {
    const auto part = dcpp::ring_partition::padded(cu, 4, rank);
    std::vector<float> local(static_cast<std::size_t>(part.tokens()) * 3);
    dcpp::partition_gather_on_host<float>(part, full, local, 3, -9.0f);
    for (std::int64_t row = 0; row < part.tokens(); ++row)
      for (int c = 0; c < 3; ++c)
        CHECK(local[row * 3 + c] ==
              (part.source_rows()[row] < 0 ? -9.0f : full[part.source_rows()[row] * 3 + c]));
    dcpp::partition_scatter_on_host<float>(part, local, back, 3);
  }
  CHECK(back == full);
}

TEST_CASE("ring attention: bad input is a clear error on every rank") {
  CHECK_THROWS_WITH(dcpp::ring_partition({0, 5}, {0, 6}, 2, 0),
                    "ring attention: sample 0 has 5 real and 6 padded tokens; the padded length "
                    "must be a multiple of 2*cp = 4 and at least the real one");
  CHECK_THROWS_WITH(dcpp::ring_partition({0, 5}, {0, 4}, 2, 0),
                    doctest::Contains("sample 0 has 5 real and 4 padded tokens"));
  CHECK_THROWS_WITH(dcpp::ring_partition::padded({0, 5}, 2, 2),
                    "ring attention: rank 2 is outside the group of 2 ranks");
  CHECK_THROWS_WITH(dcpp::ring_partition::padded({1, 5}, 2, 0), doctest::Contains("start with 0"));

  const auto b = make_batch<float>(1, {5, 9}, 4, 2, 64);
  std::vector<std::string> messages(2);
  // heads not a multiple of kv_heads on one rank only: both ranks fail with the same message
  dcpp::run_local(2, [&](dcpp::local_communicator& comm) {
    const auto part = dcpp::ring_partition::padded(b.cu, 2, comm.rank());
    auto shape = b.shape();
    if (comm.rank() == 1)
      shape.kv_heads = 3;
    const auto n = static_cast<std::size_t>(part.tokens());
    std::vector<float> q(n * 4 * 64), k(n * 2 * 64), v(n * 2 * 64), o(q.size()), lse(n * 4);
    try {
      dcpp::ring_attention_forward<dcpp::local_communicator, float>(comm, part, shape, q, k, v, o,
                                                                    lse);
    } catch (const dcpp::error& e) {
      messages[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  CHECK(messages[0] == messages[1]);
  CHECK(messages[0].find("heads = 4 must be a positive multiple of kv_heads = 3") !=
        std::string::npos);
  // a short output buffer and an unsupported head dim
  dcpp::run_local(2, [&](dcpp::local_communicator& comm) {
    const auto part = dcpp::ring_partition::padded(b.cu, 2, comm.rank());
    const auto n = static_cast<std::size_t>(part.tokens());
    std::vector<float> q(n * 4 * 64), k(n * 2 * 64), v(n * 2 * 64), o(q.size() - 1), lse(n * 4);
    CHECK_THROWS_WITH((dcpp::ring_attention_forward<dcpp::local_communicator, float>(
                          comm, part, b.shape(), q, k, v, o, lse)),
                      doctest::Contains("o has 2559 elements, expected 2560 (10 local tokens)"));
    auto shape = b.shape();
    shape.head_dim = 32;
    std::vector<float> q32(n * 4 * 32), k32(n * 2 * 32), v32(k32.size()), o32(q32.size());
    CHECK_THROWS_WITH(
        (dcpp::ring_attention_forward<dcpp::local_communicator, float>(comm, part, shape, q32, k32,
                                                                       v32, o32, lse)),
        doctest::Contains("head_dim = 32; dcpp's kernels take 64, 96, 128, 192 or 256"));
    // a V head dim the kernels do not pair with Q/K's, and a misaligned q
    shape.head_dim = 128, shape.v_head_dim = 64;
    std::vector<float> qb(n * 4 * 128 + 1), kb(n * 2 * 128), vb(n * 2 * 64), ob(n * 4 * 64);
    CHECK_THROWS_WITH(
        (dcpp::ring_attention_forward<dcpp::local_communicator, float>(
            comm, part, shape, std::span<const float>(qb).first(n * 4 * 128), kb, vb, ob, lse)),
        doctest::Contains("head_dim = 128 with v_head_dim = 64"));
    shape.v_head_dim = 128;
    std::vector<float> vc(n * 2 * 128), oc(n * 4 * 128);
    CHECK_THROWS_WITH(
        (dcpp::ring_attention_forward<dcpp::local_communicator, float>(
            comm, part, shape, std::span<const float>(qb).subspan(1), kb, vc, oc, lse)),
        doctest::Contains("q is not 16-byte aligned"));
    // a token row wider than the kernels' 32-bit row stride (2^23 heads x 256), before any
    // buffer is read; 2^23 x 192 (MLA's Q/K width) still fits and fails on the buffer sizes
    shape.heads = 1 << 23, shape.kv_heads = 1, shape.head_dim = 256, shape.v_head_dim = 256;
    CHECK_THROWS_WITH((dcpp::ring_attention_forward<dcpp::local_communicator, float>(
                          comm, part, shape, q, k, v, o, lse)),
                      doctest::Contains("heads = 8388608 x head dim 256 = 2147483648 elements per "
                                        "token is over 2^31 - 1"));
    shape.head_dim = 192, shape.v_head_dim = 128;
    CHECK_THROWS_WITH((dcpp::ring_attention_forward<dcpp::local_communicator, float>(
                          comm, part, shape, q, k, v, o, lse)),
                      doctest::Contains("q has 2560 elements, expected"));
  });
}

TEST_CASE("ring attention: the kernels' no-alias precondition is checked, by name") {
  using dcpp::kernels::attention_overlap;
  using dcpp::kernels::attention_pass;
  // 7 tokens, 4 heads over 2 KV heads, MLA's 192 (Q/K) and 128 (V): one arena, buffers carved out
  // of it at chosen offsets so that the overlap is exactly one byte or none
  constexpr std::int64_t n = 7, h = 4, hk = 2, dqk = 192, dv = 128;
  std::vector<std::byte> arena(1 << 22);
  std::byte* base = arena.data();
  const std::int64_t q_bytes = n * h * dqk * 2, k_bytes = n * hk * dqk * 2,
                     v_bytes = n * hk * dv * 2, o_bytes = n * h * dv * 4;
  dcpp::kernels::attention_params<dcpp::bfloat16> p;
  p.tokens = n, p.heads = h, p.kv_heads = hk;
  std::int64_t at = 0;
  const auto named = [](const char* s) { return std::string(s != nullptr ? s : "(none)"); };
  const auto take = [&](std::int64_t bytes) {
    std::byte* b = base + at;
    at += bytes;
    return b;
  };
  p.q = reinterpret_cast<const dcpp::bfloat16*>(take(q_bytes));
  p.k = reinterpret_cast<const dcpp::bfloat16*>(take(k_bytes));
  p.v = reinterpret_cast<const dcpp::bfloat16*>(take(v_bytes));
  p.o = reinterpret_cast<float*>(take(o_bytes));
  p.lse = reinterpret_cast<float*>(take(n * h * 4));
  CHECK(attention_overlap(p, dqk, dv, attention_pass::forward) == nullptr);
  // o's last byte on v's first: o starts one element (minus a byte) before v ends
  const auto* saved_o = p.o;
  p.o = reinterpret_cast<float*>(reinterpret_cast<std::byte*>(const_cast<dcpp::bfloat16*>(p.v)) +
                                 v_bytes - 4);
  CHECK(named(attention_overlap(p, dqk, dv, attention_pass::forward)) == "o");
  p.o = const_cast<float*>(saved_o);
  // lse written over o: outputs must be disjoint too
  p.lse = p.o + n * h * dv - 1;
  CHECK(named(attention_overlap(p, dqk, dv, attention_pass::forward)) == "lse");
  p.lse = p.o + n * h * dv;
  CHECK(attention_overlap(p, dqk, dv, attention_pass::forward) == nullptr);
  // in place (o over q), as conv1d's in-place call would: refused
  p.o = reinterpret_cast<float*>(const_cast<dcpp::bfloat16*>(p.q));
  CHECK(named(attention_overlap(p, dqk, dv, attention_pass::forward)) == "o");
  p.o = const_cast<float*>(saved_o);

  // backward: dO, O, LSE, D in; dQ, dK, dV out
  p.out = reinterpret_cast<const dcpp::bfloat16*>(take(n * h * dv * 2));
  p.dout = reinterpret_cast<const dcpp::bfloat16*>(take(n * h * dv * 2));
  p.lse_final = reinterpret_cast<const float*>(take(n * h * 4));
  p.dsum = reinterpret_cast<float*>(take(n * h * 4));
  p.dq = reinterpret_cast<float*>(take(n * h * dqk * 4));
  p.dk = reinterpret_cast<float*>(take(n * hk * dqk * 4));
  p.dv = reinterpret_cast<float*>(take(n * hk * dv * 4));
  REQUIRE(at <= static_cast<std::int64_t>(arena.size()));
  CHECK(attention_overlap(p, dqk, dv, attention_pass::backward) == nullptr);
  CHECK(attention_overlap(p, dqk, dv, attention_pass::dsum) == nullptr);
  p.dv = p.dk + n * hk * dqk - 1; // dV's first element on dK's last
  CHECK(named(attention_overlap(p, dqk, dv, attention_pass::backward)) == "dv");
  p.dv = p.dk + n * hk * dqk;
  p.dsum = reinterpret_cast<float*>(const_cast<dcpp::bfloat16*>(p.dout)); // D over dO
  CHECK(named(attention_overlap(p, dqk, dv, attention_pass::dsum)) == "dsum");
  CHECK(attention_overlap(p, dqk, dv, attention_pass::backward) == nullptr); // inputs may share
  p.dq = const_cast<float*>(p.lse_final) + 1; // dQ over the final LSE
  CHECK(named(attention_overlap(p, dqk, dv, attention_pass::backward)) == "dq");
  p.dq = nullptr; // a null buffer is not checked
  CHECK(attention_overlap(p, dqk, dv, attention_pass::backward) == nullptr);
}

namespace {

//! The ring's outputs over the whole batch (every rank's real rows scattered back), as doubles.
struct full_outputs {
  std::vector<double> o, lse, dq, dk, dv;
};

template <class Policy = dcpp::host_attention, class T = float>
full_outputs run_full(int cp, const batch<T>& b) {
  const int H = b.heads, Hk = b.kv_heads, D = b.dim, Dv = b.vdim;
  const auto n = static_cast<std::size_t>(b.tokens());
  std::vector<T> o(n * H * Dv), dq(n * H * D), dk(n * Hk * D), dv(n * Hk * Dv);
  std::vector<float> lse(n * H);
  dcpp::run_local(cp, [&](dcpp::local_communicator& comm) {
    const auto part = dcpp::ring_partition::padded(b.cu, cp, comm.rank());
    const auto m = static_cast<std::size_t>(part.tokens());
    std::vector<T> q(m * H * D), k(m * Hk * D), v(m * Hk * Dv), dout(m * H * Dv);
    dcpp::partition_gather_on_host<T>(part, b.q, q, H * D);
    dcpp::partition_gather_on_host<T>(part, b.k, k, Hk * D);
    dcpp::partition_gather_on_host<T>(part, b.v, v, Hk * Dv);
    dcpp::partition_gather_on_host<T>(part, b.dout, dout, H * Dv);
    std::vector<T> lo(m * H * Dv), ldq(m * H * D), ldk(m * Hk * D), ldv(m * Hk * Dv);
    std::vector<float> llse(m * H);
    dcpp::ring_attention_forward<dcpp::local_communicator, T>(comm, part, b.shape(), q, k, v, lo,
                                                              llse, Policy{});
    dcpp::ring_attention_backward<dcpp::local_communicator, T>(comm, part, b.shape(), q, k, v, lo,
                                                               llse, dout, ldq, ldk, ldv, Policy{});
    dcpp::partition_scatter_on_host<T>(part, lo, o, H * Dv);
    dcpp::partition_scatter_on_host<float>(part, llse, lse, H);
    dcpp::partition_scatter_on_host<T>(part, ldq, dq, H * D);
    dcpp::partition_scatter_on_host<T>(part, ldk, dk, Hk * D);
    dcpp::partition_scatter_on_host<T>(part, ldv, dv, Hk * Dv);
  });
  const auto wide = [](const auto& x) {
    std::vector<double> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      out[i] = dcpp::to_float(x[i]);
    return out;
  };
  return {wide(o), wide(lse), wide(dq), wide(dk), wide(dv)};
}

//! How got's NaN pattern compares with the reference's: `missing`, reference NaN but got not;
//! `extra`, got NaN where the reference is finite (`extra_outside`: of those, the ones in
//! another sequence than the NaN's, by token rows of `width` elements); and the largest error
//! of the rest (relative to the largest finite reference value).
struct nan_match {
  std::int64_t nan = 0, missing = 0, extra = 0, extra_outside = 0;
  double error = 0;
};

nan_match compare_nan(const std::vector<double>& got, const std::vector<double>& want,
                      std::int64_t width, std::int64_t first, std::int64_t last) {
  nan_match m;
  double scale = 1e-30;
  for (const double w : want)
    if (std::isfinite(w))
      scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool gn = std::isnan(got[i]), wn = std::isnan(want[i]);
    m.nan += wn;
    if (wn && !gn)
      ++m.missing;
    if (gn && !wn) {
      ++m.extra;
      const auto token = static_cast<std::int64_t>(i) / width;
      m.extra_outside += token < first || token >= last;
    }
    if (!gn && !wn)
      m.error = std::max(m.error, std::abs(got[i] - want[i]) / scale);
  }
  return m;
}

} // namespace

TEST_CASE("ring attention: a NaN in Q or K reaches the rows that see it, at every cp") {
  // Seeded positions in a batch of awkward lengths; the fp64 reference propagates NaN by its
  // definition (exp of a NaN score poisons the row's sum). O, LSE and dV, and dK for a NaN in K
  // and dQ for a NaN in Q, must have the reference's NaN pattern exactly; the other gradient
  // (dK for Q, dQ for K) every NaN of the reference and, besides, only elements of the NaN's
  // own sequence (zero weights times the NaN row inside a tile's MMA: docs/kernels.md); every
  // other value must match the reference.
  std::mt19937_64 rng(2211);
  for (const char* where : {"q", "k"}) {
    const bool in_q = std::string(where) == "q";
    for (const int cp : quick() ? std::vector<int>{1, 4} : std::vector<int>{1, 2, 3, 4, 8}) {
      auto b = make_batch<float>(900 + cp, {37, 90, 5, 130}, 4, 2, 64);
      const auto row = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(b.tokens()));
      auto& x = in_q ? b.q : b.k;
      const int heads = in_q ? b.heads : b.kv_heads;
      const int head = static_cast<int>(rng() % static_cast<std::uint64_t>(heads));
      x[static_cast<std::size_t>((row * heads + head) * b.dim + 5)] =
          std::numeric_limits<float>::quiet_NaN();
      std::int64_t first = 0, last = 0;
      for (std::size_t s = 0; s + 1 < b.cu.size(); ++s)
        if (row >= b.cu[s] && row < b.cu[s + 1])
          first = b.cu[s], last = b.cu[s + 1];
      const auto ref = attend(b);
      const auto got = run_full(cp, b);
      INFO(fmt::format("NaN in {} row {} head {}, cp {}", where, row, head, cp));
      const std::int64_t H = b.heads, Hk = b.kv_heads, D = b.dim;
      for (const auto& [name, g, w, width, exact] :
           {std::tuple{"o", &got.o, &ref.o, H * D, true},
            std::tuple{"lse", &got.lse, &ref.lse, H, true},
            std::tuple{"dq", &got.dq, &ref.dq, H * D, in_q},
            std::tuple{"dk", &got.dk, &ref.dk, Hk * D, !in_q},
            std::tuple{"dv", &got.dv, &ref.dv, Hk * D, true}}) {
        const auto m = compare_nan(*g, *w, width, first, last);
        INFO(fmt::format("{}: {} NaN in the reference, {} missing, {} extra ({} outside the "
                         "sequence), error {:.2e}",
                         name, m.nan, m.missing, m.extra, m.extra_outside, m.error));
        CHECK(m.nan > 0);
        CHECK(m.missing == 0);
        CHECK(m.extra_outside == 0);
        if (exact)
          CHECK(m.extra == 0);
        CHECK(m.error <= 1e-5);
      }
    }
  }
}

TEST_CASE_TEMPLATE("ring attention: an inf or NaN in V reaches exactly the O of the rows that see "
                   "it, never the LSE",
                   T, float, dcpp::half, dcpp::bfloat16) {
  // A masked pair's P is exactly 0 and 0 x NaN = NaN: inside the tile's P V product a NaN or
  // inf of V at key t reached the rows before t of its tile (it did, as in FlashAttention). The
  // value sits in the diagonal tile of its sequence at every cp (key 41 of a 90-token sequence,
  // and key 1 of a 5-token one), in one column of one head.
  // the sanitizer build (DCPP_TESTS_QUICK) runs cp 4 (the ring's steps) with NaN and -inf
  const std::vector<int> cps = quick() ? std::vector<int>{4} : std::vector<int>{1, 2, 3, 4};
  std::vector<float> values = {std::numeric_limits<float>::quiet_NaN(),
                               -std::numeric_limits<float>::infinity()};
  if (!quick())
    values.push_back(std::numeric_limits<float>::infinity());
  for (const float bad : values)
    for (const auto& [row, first, last] :
         {std::tuple<std::int64_t, std::int64_t, std::int64_t>{37 + 41, 37, 127},
          std::tuple<std::int64_t, std::int64_t, std::int64_t>{127 + 1, 127, 132}})
      for (const int cp : cps) {
        auto b = make_batch<T>(950 + cp, {37, 90, 5}, 2, 1, 64);
        b.v[static_cast<std::size_t>(row * b.vdim + 3)] = dcpp::from_float<T>(bad);
        const auto ref = attend(b);
        const auto got = run_full(cp, b);
        INFO(fmt::format("{} in V at row {}, cp {}", bad, row, cp));
        // the LSE does not depend on V
        const auto lse = compare_nan(got.lse, ref.lse, b.heads, first, last);
        CHECK(lse.nan == 0);
        CHECK(lse.extra == 0);
        CHECK(lse.error <= 1e-5);
        double scale = 1e-30;
        for (const double w : ref.o)
          if (std::isfinite(w))
            scale = std::max(scale, std::abs(w));
        std::int64_t nonfinite = 0, wrong = 0, leaked = 0;
        for (std::int64_t t = 0; t < b.tokens(); ++t)
          for (int c = 0; c < b.heads * b.vdim; ++c) {
            const auto at = static_cast<std::size_t>(t * b.heads * b.vdim + c);
            if (!std::isfinite(ref.o[at])) {
              ++nonfinite;
              wrong += std::isfinite(got.o[at]); // every row that sees it: inf or NaN
            } else if (!std::isfinite(got.o[at])) {
              ++leaked; // a row that does not see it
            } else {
              wrong += std::abs(got.o[at] - ref.o[at]) / scale > tolerance<T>::o;
            }
          }
        CHECK(nonfinite == 2 * (last - row)); // both heads share the kv head
        CHECK(wrong == 0);
        CHECK(leaked == 0);
      }
}

TEST_CASE_TEMPLATE("ring attention: a row whose every score overflows fp32 comes out NaN, not 0", T,
                   float, dcpp::bfloat16) {
  // Q row `row` is +3e19 and the keys of its sequence -3e19 in every element: each product is
  // -9e38, past fp32's 3.4e38, so each of the row's scores is -inf. O = 0 with LSE = -inf (the
  // value of a row that sees no key) was finite and wrong without a word; the row is NaN now.
  // Every other row, of its sequence and the others, is the reference's.
  const std::vector<int> cps = quick() ? std::vector<int>{1, 4} : std::vector<int>{1, 2, 3, 4};
  for (const std::int64_t row : {std::int64_t{37 + 60}, std::int64_t{37}})
    for (const int cp : cps) {
      auto b = make_batch<T>(990 + cp, {37, 90, 5}, 2, 1, 64);
      for (std::int64_t t = 37; t < 127; ++t)
        for (int d = 0; d < b.dim; ++d)
          b.k[static_cast<std::size_t>(t * b.dim + d)] = dcpp::from_float<T>(-3e19f);
      for (int d = 0; d < b.dim; ++d)
        b.q[static_cast<std::size_t>(row * b.heads * b.dim + d)] = dcpp::from_float<T>(3e19f);
      const auto ref = attend(b);
      const auto got = run_full(cp, b);
      INFO(fmt::format("row {}, cp {}", row, cp));
      CHECK(std::isnan(got.lse[static_cast<std::size_t>(row * b.heads)]));
      for (int d = 0; d < b.vdim; ++d)
        CHECK(std::isnan(got.o[static_cast<std::size_t>(row * b.heads * b.vdim + d)]));
      // the other head of that row and every other row: finite; the other sequences' rows the
      // reference's (in this sequence, scores near 1e19 lose digits to fp32 cancellation)
      for (std::int64_t t = 0; t < b.tokens(); ++t)
        for (int h = 0; h < b.heads; ++h) {
          if (t == row && h == 0)
            continue;
          const auto at = static_cast<std::size_t>(t * b.heads + h);
          CHECK(std::isfinite(got.lse[at]));
          if (t < 37 || t >= 127)
            CHECK(std::abs(got.lse[at] - ref.lse[at]) <= tolerance<T>::lse);
        }
    }
}
