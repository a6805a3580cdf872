// THD ring attention, the backward's first kernels: the row sums D = rowsum(dO * O) and dQ of
// one ring step (FlashAttention-2's dQ loop).
#pragma once

#include "dcpp/kernels/attention/gemm.hpp"

namespace dcpp::kernels {

//! Backward pre-pass: dsum[row, h] = sum_d dO * O (fp32), one thread per (row, head).
template <int D, class T, class Ctx>
DCPP_HOST_DEVICE void attention_dsum_body(Ctx& ctx, const attention_params<T>& p) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i >= p.tokens * p.heads)
    return;
  const T* o = p.out + i * D;
  const T* d = p.dout + i * D;
  float sum = 0.0f;
  for (int c = 0; c < D; ++c)
    sum += to_float(o[c]) * to_float(d[c]);
  p.dsum[i] = sum;
}

//! Backward dQ of a step: block (query tile, head), FlashAttention-2's dQ loop. Q and dO are
//! loaded once; per key tile S = Q K^T and dP = dO V^T give P (from the final LSE) and
//! dS = P (dP - D) in registers, and dQ += dS K with dS as the A operand. K is double-buffered:
//! the next K and V load while dS K runs. dQ is one pass per query tile over all its keys (no
//! atomics: the result is deterministic). Adds scale * dS K to p.dq for the tile's rows.
//! Launch like the forward, dq_shared bytes.
template <int DQK, int DV, class T, class Ctx>
DCPP_HOST_DEVICE void attention_dq_body(Ctx& ctx, const attention_params<T>& p) {
  using cfg = attention_tile<DQK, DV, T>;
  constexpr int MW = cfg::backward_slices, WR = 16 * MW; // 16-row slices and rows per warp
  constexpr int BM = cfg::backward_rows, BN = cfg::dq_inner, NT = BN / 8, DT = DQK / 8;
  constexpr int LDQ = cfg::ldq, LDV = cfg::ldv, TH = cfg::threads;
  const int tile = static_cast<int>(ctx.block_index().x), h = static_cast<int>(ctx.block_index().y);
  const int hk = h / (p.heads / p.kv_heads);
  const detail::attention_block blk = detail::attention_block_of(p, tile);
  const int row0 = blk.row0, row1 = blk.row1;
  const detail::attention_sequence& sq = blk.seq;
  T* qs = ctx.template shared_array<T>(BM * LDQ);
  T* dos = ctx.template shared_array<T>(BM * LDV);
  T* ks = ctx.template shared_array<T>(2 * BN * LDQ);
  T* vs = ctx.template shared_array<T>(BN * LDV);
  T* staging = ctx.template shared_array<T>(cfg::staging);
  const unsigned lane = simt::lane_of(ctx), warp = simt::warp_of(ctx);
  const detail::attention_query_block<DQK, DV, T> qb(p, sq, hk, row1, BN);
  const std::int64_t q_stride = qb.q_stride, o_stride = qb.o_stride;
  const std::int64_t k_stride = qb.k_stride, v_stride = qb.v_stride;
  const T *k_base = qb.k_base, *v_base = qb.v_base;
  const int k_lo = qb.k_lo, k_hi = qb.k_hi, n_tiles = qb.n_tiles;
  detail::attention_copy<DQK, LDQ, BM, TH>(ctx, qs, p.q + row0 * q_stride + h * DQK, q_stride,
                                           row1 - row0);
  detail::attention_copy<DV, LDV, BM, TH>(ctx, dos, p.dout + row0 * o_stride + h * DV, o_stride,
                                          row1 - row0);
  if (n_tiles > 0) {
    detail::attention_copy<DQK, LDQ, BN, TH>(ctx, ks, k_base + k_lo * k_stride, k_stride,
                                             detail::attention_min(BN, k_hi - k_lo));
    detail::attention_copy<DV, LDV, BN, TH>(ctx, vs, v_base + k_lo * v_stride, v_stride,
                                            detail::attention_min(BN, k_hi - k_lo));
  }
  ctx.cp_async_commit();

  const int warp_row = row0 - sq.base + static_cast<int>(warp) * WR;
  const int g = static_cast<int>(lane / 4);
  // per fragment row (slice mw, half r at index 2 mw + r): final LSE (log2 units) and D
  float lse2[2 * MW], dsum[2 * MW];
  DCPP_UNROLL
  for (int r = 0; r < 2 * MW; ++r)
    detail::attention_row_stats(p, sq, warp_row + detail::attention_fragment_row(r, g), row1, h,
                                lse2[r], dsum[r]);
  const float scale2 = p.scale * detail::attention_log2e;
  simt::mma_accumulator acc[MW * DT];
  DCPP_UNROLL
  for (int dt = 0; dt < MW * DT; ++dt)
    acc[dt] = {};
  T* warp_staging = staging + warp * 16 * cfg::pld;

  for (int t = 0; t < n_tiles; ++t) {
    const int kb = k_lo + t * BN;
    const T* kt = ks + (t % 2) * BN * LDQ;
    ctx.template cp_async_wait<0>();
    ctx.sync_block(); // K_t and V_t are in; every warp is done with K_{t-1}
    // causal: a warp whose rows all precede the tile's keys skips it; the barriers stay shared
    const bool warp_active = p.kind != ring_step_kind::diagonal || kb <= warp_row + WR - 1;
    simt::mma_accumulator sc[MW * NT]{}, dp[MW * NT]{}; // zero, also for GCC's flow analysis
    if (warp_active) {
      detail::attention_gemm_abt<DQK, NT, MW>(ctx, sc, qs + warp * WR * LDQ, LDQ, kt, LDQ);
      detail::attention_gemm_abt<DV, NT, MW>(ctx, dp, dos + warp * WR * LDV, LDV, vs, LDV);
      const bool masked = kb + BN > k_hi || sq.keys_padded(kb, kb + BN) ||
                          (p.kind == ring_step_kind::diagonal && kb + BN - 1 > warp_row);
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        DCPP_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          DCPP_UNROLL
          for (int e = 0; e < 4; ++e) {
            const int r = 2 * mw + (e >> 1);
            simt::mma_accumulator& x = sc[mw * NT + nt];
            float pv = detail::attention_exp2(x.x[e] * scale2 - lse2[r]);
            if (masked) {
              const simt::mma_coord c = simt::mma_c_coord(lane, e);
              const int i = warp_row + mw * 16 + c.row, j = kb + nt * 8 + c.col;
              if (!(j < k_hi && sq.key_real(j) && (p.kind != ring_step_kind::diagonal || j <= i)))
                pv = 0.0f;
            }
            x.x[e] = pv * (dp[mw * NT + nt].x[e] - dsum[r]); // dS
          }
        }
      }
    }
    ctx.sync_block(); // every warp is done with V_t
    if (t + 1 < n_tiles) {
      const int kn = kb + BN, nk = detail::attention_min(BN, k_hi - kn);
      detail::attention_copy<DQK, LDQ, BN, TH>(ctx, ks + ((t + 1) % 2) * BN * LDQ,
                                               k_base + kn * k_stride, k_stride, nk);
      detail::attention_copy<DV, LDV, BN, TH>(ctx, vs, v_base + kn * v_stride, v_stride, nk);
      ctx.cp_async_commit();
    }
    if (warp_active)
      detail::attention_gemm_pb<BN, DT, MW>(ctx, acc, sc, kt, LDQ, warp_staging, cfg::pld);
  }
  ctx.template cp_async_wait<0>(); // no copy outlives the block

  DCPP_UNROLL
  for (int r = 0; r < 2 * MW; ++r) {
    const int row = sq.base + warp_row + detail::attention_fragment_row(r, g);
    if (row >= row1)
      continue;
    float* dq = p.dq + row * q_stride + h * DQK + 2 * static_cast<int>(lane % 4);
    DCPP_UNROLL
    for (int dt = 0; dt < DT; ++dt) {
      const simt::mma_accumulator& a = acc[(r >> 1) * DT + dt];
      detail::attention_add2(dq + dt * 8, a.x[2 * (r & 1)] * p.scale,
                             a.x[2 * (r & 1) + 1] * p.scale);
    }
  }
}

//! Which accumulators a dK/dV launch computes (both, or one each in two launches when the two
//! would not fit in registers together: attention_tile::split_dkv).

} // namespace dcpp::kernels
