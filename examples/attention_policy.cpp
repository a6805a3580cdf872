// attention_policy: the seam between dcpp's ring and a per-step attention kernel. A stack that
// already has FlashAttention-3 or cuDNN's varlen attention keeps dcpp's partition, ring, merge
// and planner and plugs its kernel in as a policy; this example's policy is a plain reference
// (loops, fp64 inside) that documents the contract. It runs the ring with it and with dcpp's own
// kernels (host launcher) on the same random batch at cp = 2 and 4, and checks that the two
// agree. Exit status 0 when they do.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <random>
#include <span>
#include <vector>

#include <dcpp/attention/ring.hpp>
#include <dcpp/comm/local.hpp>

namespace {

// [policy]
//! A per-step attention kernel for dcpp's ring: any type with these two members models
//! dcpp::attention_policy<P, T>.
struct reference_attention {
  //! Whether query row i sees key row j (local rows of sequence `seq`) in this step. Each local
  //! sequence is two zigzag halves; real rows are a prefix of each half (layout.q_real for this
  //! rank's rows, layout.kv_real for the K/V owner's).
  template <class T>
  static bool visible(const dcpp::attention_step<T>& s, int seq, int i, int j) {
    const auto& l = s.params.layout;
    const int half = (l.offset[seq + 1] - l.offset[seq]) / 2;
    auto real = [&](const std::int32_t* r, int x) {
      return x < half ? x < r[2 * seq] : x - half < r[2 * seq + 1];
    };
    using kind = dcpp::kernels::ring_step_kind;
    if (s.params.kind == kind::diagonal && j > i) // own K/V: causal in local order
      return false;
    if (s.params.kind == kind::lower && j >= half) // an earlier rank's K/V: its first half
      return false;
    if (s.params.kind == kind::upper && i < half) // a later rank's K/V: our second half only
      return false;
    return real(l.q_real, i) && real(l.kv_real, j);
  }

  //! Calls f(q row index, [(key row, score)]) for every query row of the step and head.
  template <class T, class F>
  static void each_row(const dcpp::attention_step<T>& s, F&& f) {
    const auto& p = s.params;
    const int D = s.shape.head_dim, group = p.heads / p.kv_heads;
    for (int seq = 0; seq < p.layout.sequences; ++seq) {
      const int base = p.layout.offset[seq], len = p.layout.offset[seq + 1] - base;
      const int first = p.kind == dcpp::kernels::ring_step_kind::upper ? len / 2 : 0;
      for (int h = 0; h < p.heads; ++h)
        for (int i = first; i < len; ++i) {
          const std::int64_t row = static_cast<std::int64_t>(base + i) * p.heads + h;
          std::vector<std::pair<std::int64_t, double>> keys; // (key row * kv_heads + kv head)
          for (int j = 0; j < len; ++j) {
            if (!visible(s, seq, i, j))
              continue;
            const std::int64_t key = static_cast<std::int64_t>(base + j) * p.kv_heads + h / group;
            double dot = 0;
            for (int d = 0; d < D; ++d)
              dot += double{dcpp::to_float(p.q[row * D + d])} * dcpp::to_float(p.k[key * D + d]);
            keys.emplace_back(key, dot * p.scale);
          }
          f(row, keys);
        }
    }
  }

  //! Forward: the step's partial O (fp32, [tokens, heads, V head dim]) and LSE (natural log) of
  //! its query rows; O = 0 and LSE = -inf where no key is visible. (No `fuses_merge`: the ring
  //! merges the steps itself.)
  template <class T>
  void forward_step(const dcpp::attention_step<T>& s) const {
    const int Dv = s.shape.value_dim();
    each_row(s, [&](std::int64_t row, const auto& keys) {
      double mx = -INFINITY, sum = 0;
      for (const auto& k : keys)
        mx = std::max(mx, k.second);
      std::vector<double> o(static_cast<std::size_t>(Dv), 0.0);
      for (const auto& [key, score] : keys) {
        const double w = std::exp(score - mx);
        sum += w;
        for (int d = 0; d < Dv; ++d)
          o[d] += w * dcpp::to_float(s.params.v[key * Dv + d]);
      }
      for (int d = 0; d < Dv; ++d)
        s.params.o[row * Dv + d] = keys.empty() ? 0.0f : static_cast<float>(o[d] / sum);
      s.params.lse[row] = keys.empty() ? -INFINITY : static_cast<float>(mx + std::log(sum));
    });
  }

  //! Backward: add this step's dQ, dK, dV (fp32 accumulators) from P = exp(S - final LSE),
  //! dP = dO V^T and dS = P (dP - rowsum(dO * O)); dK/dV land on the K/V block of this step.
  template <class T>
  void backward_step(const dcpp::attention_step<T>& s) const {
    const auto& p = s.params;
    const int D = s.shape.head_dim, Dv = s.shape.value_dim();
    each_row(s, [&](std::int64_t row, const auto& keys) {
      for (const auto& [key, score] : keys) {
        const double prob = std::exp(score - p.lse_final[row]);
        double dp = 0;
        for (int d = 0; d < Dv; ++d)
          dp += double{dcpp::to_float(p.dout[row * Dv + d])} * dcpp::to_float(p.v[key * Dv + d]);
        const double ds = prob * (dp - p.dsum[row]);
        for (int d = 0; d < D; ++d) {
          p.dq[row * D + d] += static_cast<float>(p.scale * ds * dcpp::to_float(p.k[key * D + d]));
          p.dk[key * D + d] += static_cast<float>(p.scale * ds * dcpp::to_float(p.q[row * D + d]));
        }
        for (int d = 0; d < Dv; ++d)
          p.dv[key * Dv + d] += static_cast<float>(prob * dcpp::to_float(p.dout[row * Dv + d]));
      }
    });
  }
};
static_assert(dcpp::attention_policy<reference_attention, float>);
// [policy]

//! Runs forward and backward of one rank with `policy`; returns o, lse, dq, dk, dv concatenated.
template <class Policy>
std::vector<float> run(dcpp::local_communicator& comm, const std::vector<std::int32_t>& cu,
                       const dcpp::attention_shape& shape, const std::vector<float>& full_q,
                       const std::vector<float>& full_k, const std::vector<float>& full_v,
                       const std::vector<float>& full_dout, Policy policy) {
  const auto part = dcpp::ring_partition::padded(cu, comm.size(), comm.rank());
  const auto n = static_cast<std::size_t>(part.tokens());
  const int D = shape.head_dim, Dv = shape.value_dim();
  const std::size_t qw = shape.heads * D, kw = shape.kv_heads * D, ow = shape.heads * Dv,
                    vw = shape.kv_heads * Dv;
  std::vector<float> q(n * qw), k(n * kw), v(n * vw), dout(n * ow), o(n * ow), dq(n * qw),
      dk(n * kw), dv(n * vw), lse(n * shape.heads);
  dcpp::partition_gather_on_host<float>(part, full_q, q, static_cast<int>(qw));
  dcpp::partition_gather_on_host<float>(part, full_k, k, static_cast<int>(kw));
  dcpp::partition_gather_on_host<float>(part, full_v, v, static_cast<int>(vw));
  dcpp::partition_gather_on_host<float>(part, full_dout, dout, static_cast<int>(ow));
  dcpp::ring_attention_forward<dcpp::local_communicator, float>(comm, part, shape, q, k, v, o, lse,
                                                                policy);
  dcpp::ring_attention_backward<dcpp::local_communicator, float>(comm, part, shape, q, k, v, o, lse,
                                                                 dout, dq, dk, dv, policy);
  std::vector<float> all;
  for (const auto* x : {&o, &lse, &dq, &dk, &dv})
    all.insert(all.end(), x->begin(), x->end());
  return all;
}

} // namespace

int main() {
  // MLA-like head shape (Q/K 192, V 128), GQA 4:2, lengths across the kernels' tiles
  const dcpp::attention_shape shape{4, 2, 192, 0.0f, 128};
  const std::vector<std::int32_t> cu{0, 3, 70, 71, 200};
  const auto tokens = static_cast<std::size_t>(cu.back());
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](std::size_t count) {
    std::vector<float> x(count);
    for (auto& e : x)
      e = u(rng);
    return x;
  };
  const auto q = random(tokens * 4 * 192), k = random(tokens * 2 * 192),
             v = random(tokens * 2 * 128), dout = random(tokens * 4 * 128);
  bool ok = true;
  for (const int cp : {2, 4}) {
    double worst = 0;
    dcpp::run_local(cp, [&](dcpp::local_communicator& comm) {
      const auto mine = run(comm, cu, shape, q, k, v, dout, reference_attention{});
      const auto dcpps = run(comm, cu, shape, q, k, v, dout, dcpp::host_attention{});
      double err = 0;
      for (std::size_t i = 0; i < mine.size(); ++i)
        if (std::isfinite(mine[i]) || std::isfinite(dcpps[i]))
          err = std::max(err, std::abs(double{mine[i]} - dcpps[i]));
      static std::mutex m;
      std::lock_guard lock(m);
      worst = std::max(worst, err);
    });
    std::printf("attention_policy: cp = %d, reference policy vs dcpp's kernels: max |difference| "
                "%.2e over o, lse, dq, dk, dv\n",
                cp, worst);
    ok = ok && worst < 1e-4;
  }
  return ok ? 0 : 1;
}
