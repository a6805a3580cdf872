// A ring step as calls of a plain ragged attention (dcpp/attention/sdpa_calls.hpp): every
// visible (query, key) pair of every step exactly once, against a direct walk of the kernels'
// visibility rule; and the plumbing of a library policy (what `cudnn_attention` does with the
// calls: the step's calls merged through their LSE, their gradients rounded to the input type and
// added) through the host ring, with an fp64 stand-in for the library, against fp64 attention.
#include "../support.hpp"

#include "dcpp/attention/sdpa_calls.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "attention_reference.hpp"
#include "dcpp/attention/ring.hpp"
#include "dcpp/comm/local.hpp"

namespace {

using dcpp::kernels::ring_step_kind;

//! The visible pairs of a step by the kernels' rule, one sequence at a time.
std::set<std::pair<int, int>> visible_pairs(const dcpp::ring_partition& part, ring_step_kind kind,
                                            const std::vector<std::int32_t>& kv_real) {
  std::set<std::pair<int, int>> out;
  const dcpp::kernels::attention_layout l{part.offsets().data(), part.own_real().data(),
                                          kv_real.data(), part.sequences()};
  for (int s = 0; s < part.sequences(); ++s) {
    const auto sq = dcpp::kernels::detail::attention_sequence_of(l, s);
    for (int i = 0; i < sq.len; ++i) {
      if (!sq.query_real(i) || (kind == ring_step_kind::upper && i < sq.chunk))
        continue;
      for (int j = 0; j < sq.len; ++j) {
        if (!sq.key_real(j))
          continue;
        const bool sees = kind == ring_step_kind::diagonal ? j <= i
                          : kind == ring_step_kind::lower  ? j < sq.chunk
                                                           : true;
        if (sees)
          out.emplace(sq.base + i, sq.base + j);
      }
    }
  }
  return out;
}

ring_step_kind kind_of(int step, int owner, int rank) {
  return dcpp::detail::ring_step_kind_of(step, owner, rank);
}

} // namespace

TEST_CASE("sdpa calls: every visible pair of every step once, no row twice in a call") {
  std::mt19937_64 rng(2026);
  for (int trial = 0; trial < 60; ++trial) {
    const int cp = 1 + static_cast<int>(rng() % 6);
    std::vector<std::int32_t> cu{0};
    const int n = 1 + static_cast<int>(rng() % 7);
    for (int s = 0; s < n; ++s)
      cu.push_back(cu.back() + 1 + static_cast<std::int32_t>(rng() % (trial % 3 == 0 ? 7 : 90)));
    for (int rank = 0; rank < cp; ++rank) {
      const auto part = dcpp::ring_partition::padded(cu, cp, rank);
      for (int step = 0; step < cp; ++step) {
        const int owner = (rank - step + cp) % cp;
        const auto kind = kind_of(step, owner, rank);
        const auto kv_real = part.real_of(owner);
        const auto calls = dcpp::sdpa_calls(part, kind, kv_real);
        CHECK(calls.size() <= 2);
        std::multiset<std::pair<int, int>> covered;
        for (const auto& c : calls) {
          std::set<int> q_rows, k_rows;
          for (const auto& e : c.entries) {
            CHECK(e.q_rows > 0);
            CHECK(e.k_rows > 0);
            for (int i = 0; i < e.q_rows; ++i) {
              CHECK(q_rows.insert(e.q_begin + i).second);
              for (int j = 0; j < e.k_rows; ++j)
                if (!c.causal || j <= i)
                  covered.emplace(e.q_begin + i, e.k_begin + j);
            }
            for (int j = 0; j < e.k_rows; ++j)
              CHECK(k_rows.insert(e.k_begin + j).second);
          }
        }
        const auto want = visible_pairs(part, kind, kv_real);
        CHECK(covered.size() == want.size());
        CHECK(std::set<std::pair<int, int>>(covered.begin(), covered.end()) == want);
      }
    }
  }
}

namespace {

//! A stand-in for a library SDPA (cuDNN's), run in fp64 on the host: each call's O is written in
//! the input type and its LSE in fp32, as the library does; the policy merges a step's calls and
//! adds each call's gradients (in the input type) into the ring's fp32 accumulators. It does not
//! fuse the merge: the ring merges the steps.
struct library_stand_in {
  int calls = 0;

  template <class T>
  void forward_step(const dcpp::attention_step<T>& s) {
    const auto& p = s.params;
    const int H = p.heads, G = p.heads / p.kv_heads, D = s.shape.head_dim;
    const int Dv = s.shape.value_dim();
    const auto kv_real = s.partition->real_of(s.kv_owner);
    const auto rows = query_rows(*s.partition, p.kind);
    for (const int r : rows)
      for (int h = 0; h < H; ++h) {
        p.lse[r * H + h] = -std::numeric_limits<float>::infinity();
        for (int d = 0; d < Dv; ++d)
          p.o[(static_cast<std::int64_t>(r) * H + h) * Dv + d] = 0.0f;
      }
    for (const auto& c : dcpp::sdpa_calls(*s.partition, p.kind, kv_real)) {
      ++calls;
      for (const auto& e : c.entries)
        for (int h = 0; h < H; ++h)
          for (int i = 0; i < e.q_rows; ++i) {
            const int qi = e.q_begin + i;
            std::vector<double> w(static_cast<std::size_t>(e.k_rows), 0.0);
            double m = -std::numeric_limits<double>::infinity();
            const int last = c.causal ? std::min(i, e.k_rows - 1) : e.k_rows - 1;
            for (int j = 0; j <= last; ++j) {
              w[j] = score(p, s.shape, qi, e.k_begin + j, h, G, D);
              m = std::max(m, w[j]);
            }
            double sum = 0;
            for (int j = 0; j <= last; ++j)
              sum += std::exp(w[j] - m);
            const double lse = m + std::log(sum);
            // the library's output: O in the input type, the LSE in fp32; merged into the
            // step's partial result through the LSE
            const double old = p.lse[qi * H + h];
            const double top = std::max(old, lse);
            const double a = std::isinf(old) ? 0.0 : std::exp(old - top);
            const double b = std::exp(lse - top);
            for (int d = 0; d < Dv; ++d) {
              double o = 0;
              for (int j = 0; j <= last; ++j)
                o += std::exp(w[j] - lse) * value(p, e.k_begin + j, h / G, d, Dv, p.kv_heads);
              const double rounded = dcpp::to_float(dcpp::from_float<T>(static_cast<float>(o)));
              float& out = p.o[(static_cast<std::int64_t>(qi) * H + h) * Dv + d];
              out = static_cast<float>((a * out + b * rounded) / (a + b));
            }
            p.lse[qi * H + h] = static_cast<float>(top + std::log(a + b));
          }
    }
  }

  template <class T>
  void backward_step(const dcpp::attention_step<T>& s) {
    const auto& p = s.params;
    const int H = p.heads, Hk = p.kv_heads, G = p.heads / p.kv_heads, D = s.shape.head_dim;
    const int Dv = s.shape.value_dim();
    const std::int64_t n = p.tokens;
    const double scale = s.shape.softmax_scale();
    const auto kv_real = s.partition->real_of(s.kv_owner);
    for (const auto& c : dcpp::sdpa_calls(*s.partition, p.kind, kv_real)) {
      ++calls;
      // the call's gradients, written by the library in the input type
      std::vector<double> dq(static_cast<std::size_t>(n * H * D), 0.0);
      std::vector<double> dk(static_cast<std::size_t>(n * Hk * D), 0.0);
      std::vector<double> dv(static_cast<std::size_t>(n * Hk * Dv), 0.0);
      for (const auto& e : c.entries)
        for (int h = 0; h < H; ++h)
          for (int i = 0; i < e.q_rows; ++i) {
            const int qi = e.q_begin + i;
            double rowsum = 0; // D = rowsum(dO * O) of the final O
            for (int d = 0; d < Dv; ++d)
              rowsum += dcpp::to_float(p.dout[(qi * H + h) * Dv + d]) *
                        dcpp::to_float(p.out[(qi * H + h) * Dv + d]);
            const int last = c.causal ? std::min(i, e.k_rows - 1) : e.k_rows - 1;
            for (int j = 0; j <= last; ++j) {
              const int kj = e.k_begin + j;
              const double pr =
                  std::exp(score(p, s.shape, qi, kj, h, G, D) - p.lse_final[qi * H + h]);
              double dp = 0;
              for (int d = 0; d < Dv; ++d)
                dp +=
                    dcpp::to_float(p.dout[(qi * H + h) * Dv + d]) * value(p, kj, h / G, d, Dv, Hk);
              const double ds = pr * (dp - rowsum);
              for (int d = 0; d < D; ++d) {
                dq[(qi * H + h) * D + d] += scale * ds * key(p, kj, h / G, d, D, Hk);
                dk[(kj * Hk + h / G) * D + d] +=
                    scale * ds * dcpp::to_float(p.q[(qi * H + h) * D + d]);
              }
              for (int d = 0; d < Dv; ++d)
                dv[(kj * Hk + h / G) * Dv + d] +=
                    pr * dcpp::to_float(p.dout[(qi * H + h) * Dv + d]);
            }
          }
      const auto add = [](float* acc, const std::vector<double>& g) {
        for (std::size_t i = 0; i < g.size(); ++i)
          acc[i] += dcpp::to_float(dcpp::from_float<T>(static_cast<float>(g[i])));
      };
      add(p.dq, dq);
      add(p.dk, dk);
      add(p.dv, dv);
    }
  }

private:
  static std::vector<int> query_rows(const dcpp::ring_partition& part, ring_step_kind kind) {
    std::vector<int> rows;
    for (int s = 0; s < part.sequences(); ++s) {
      const int base = part.offsets()[s], len = part.offsets()[s + 1] - base;
      for (int i = kind == ring_step_kind::upper ? len / 2 : 0; i < len; ++i)
        rows.push_back(base + i);
    }
    return rows;
  }
  template <class T>
  static double key(const dcpp::kernels::attention_params<T>& p, int row, int hk, int d, int D,
                    int Hk) {
    return dcpp::to_float(p.k[(static_cast<std::int64_t>(row) * Hk + hk) * D + d]);
  }
  template <class T>
  static double value(const dcpp::kernels::attention_params<T>& p, int row, int hk, int d, int Dv,
                      int Hk) {
    return dcpp::to_float(p.v[(static_cast<std::int64_t>(row) * Hk + hk) * Dv + d]);
  }
  template <class T>
  static double score(const dcpp::kernels::attention_params<T>& p,
                      const dcpp::attention_shape& shape, int qi, int kj, int h, int G, int D) {
    double x = 0;
    for (int d = 0; d < D; ++d)
      x += dcpp::to_float(p.q[(static_cast<std::int64_t>(qi) * p.heads + h) * D + d]) *
           key(p, kj, h / G, d, D, p.kv_heads);
    return x * shape.softmax_scale();
  }
};

} // namespace

TEST_CASE_TEMPLATE("sdpa calls: a library policy's plumbing through the host ring equals fp64 "
                   "attention",
                   T, float, dcpp::bfloat16) {
  using namespace dcpp_test::attention;
  static_assert(dcpp::attention_policy<library_stand_in, T>);
  static_assert(!dcpp::attention_fuses_merge<library_stand_in>);
  struct shape {
    int heads, kv_heads, dim, vdim;
  };
  // the sanitizer build (DCPP_TESTS_QUICK) runs cp 1 and 3 (a ring of odd size)
  const std::vector<int> cps =
      dcpp_test::quick() ? std::vector<int>{1, 3} : std::vector<int>{1, 2, 3, 4};
  for (const shape sh : {shape{4, 2, 64, 0}, shape{2, 1, 192, 128}})
    for (const int cp : cps) {
      const auto b =
          make_batch<T>(4100 + cp, {1, 17, 65, 130, 3, 41}, sh.heads, sh.kv_heads, sh.dim, sh.vdim);
      const auto ref = attend(b);
      std::vector<rank_errors> errors(static_cast<std::size_t>(cp));
      std::vector<int> calls(static_cast<std::size_t>(cp));
      dcpp::run_local(cp, [&](dcpp::local_communicator& comm) {
        library_stand_in policy;
        errors[static_cast<std::size_t>(comm.rank())] =
            run_rank<T, dcpp::local_communicator, library_stand_in&>(comm, b, ref, 41, policy);
        calls[static_cast<std::size_t>(comm.rank())] = policy.calls;
      });
      for (int r = 0; r < cp; ++r) {
        CAPTURE(cp);
        CAPTURE(r);
        const auto& e = errors[static_cast<std::size_t>(r)];
        CHECK(e.padding_ok);
        // the library writes each call's O and gradients in the input type: one rounding more
        // per call than dcpp's kernels, whose partial results stay fp32
        CHECK(e.o <= 2 * tolerance<T>::o);
        CHECK(e.lse <= tolerance<T>::lse);
        CHECK(e.dq <= 2 * tolerance<T>::grad);
        CHECK(e.dk <= 2 * tolerance<T>::grad);
        CHECK(e.dv <= 2 * tolerance<T>::grad);
        // at most two calls a step, forward and backward
        CHECK(calls[static_cast<std::size_t>(r)] <= 4 * cp);
        CHECK(calls[static_cast<std::size_t>(r)] >= 2);
      }
    }
}
