// THD ring attention, the forward: one ring step's partial O and LSE (FlashAttention-2's loop),
// and the LSE merge of a step into the running result.
#pragma once

#include "dcpp/kernels/attention/gemm.hpp"

namespace dcpp::kernels {

//! Forward step: block (tile, head), FlashAttention-2's loop. Q is loaded once; per key tile the
//! next K streams in (cp.async) while P V runs and V while Q K^T runs; the online softmax keeps
//! P in registers; only tiles at a boundary (the causal diagonal, a padding gap, the end of the
//! keys) are masked. Writes the partial O (fp32, 8-byte stores) and LSE of every row of the tile
//! (O = 0, LSE = -inf where nothing is visible or the query is padding).
//! Launch: grid (tiles.count, heads), attention_tile::threads threads, forward_shared bytes.
template <int DQK, int DV, class T, class Ctx>
DCPP_HOST_DEVICE void attention_forward_body(Ctx& ctx, const attention_params<T>& p) {
  using cfg = attention_tile<DQK, DV, T>;
  constexpr int MW = cfg::forward_slices, WR = 16 * MW; // 16-row slices and rows per warp
  constexpr int BM = cfg::forward_rows, BN = cfg::forward_inner, NT = BN / 8, DT = DV / 8;
  constexpr int LDQ = cfg::ldq, LDV = cfg::ldv, TH = cfg::threads;
  const int tile = static_cast<int>(ctx.block_index().x), h = static_cast<int>(ctx.block_index().y);
  const int hk = h / (p.heads / p.kv_heads);
  // The block's rows and sequence, read again where the masked tiles and the epilogue need
  // them (L1 hits) rather than kept live across the main loop, where 32-row warps need every
  // register (kept, they spilled 40 bytes at head dim 128).
  const auto block_facts = [&p, tile] { return detail::attention_block_of(p, tile); };
  const detail::attention_block blk = block_facts();
  const int row0 = blk.row0, row1 = blk.row1;
  const detail::attention_sequence& sq = blk.seq;
  T* qs = ctx.template shared_array<T>(BM * LDQ);
  T* ks = ctx.template shared_array<T>(BN * LDQ);
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
  if (n_tiles > 0)
    detail::attention_copy<DQK, LDQ, BN, TH>(ctx, ks, k_base + k_lo * k_stride, k_stride,
                                             detail::attention_min(BN, k_hi - k_lo));
  ctx.cp_async_commit(); // group: Q and the first K

  const float scale2 = p.scale * detail::attention_log2e;
  const int g = static_cast<int>(lane / 4);
  // per fragment row (slice mw, half r at index 2 mw + r): running max of scale2 * S (log2
  // units) and the lane's part of the row sum
  float m[2 * MW], l[2 * MW];
  DCPP_UNROLL
  for (int r = 0; r < 2 * MW; ++r)
    m[r] = detail::attention_neg_inf(), l[r] = 0.0f;
  simt::mma_accumulator acc[MW * DT];
  DCPP_UNROLL
  for (int dt = 0; dt < MW * DT; ++dt)
    acc[dt] = {};
  T* warp_staging = staging + warp * 16 * cfg::pld;

  // One key tile; Masked: the tile may cross the causal diagonal, a padding gap or the end of
  // the keys (a separate instance, so that the clean tiles carry no mask code at all).
  const auto step = [&](int t, auto masked_tile) {
    constexpr bool Masked = decltype(masked_tile)::value;
    const int kb = k_lo + t * BN, nk = detail::attention_min(BN, k_hi - kb);
    ctx.template cp_async_wait<0>();
    ctx.sync_block(); // K_t is in; every warp is done with V_{t-1}
    detail::attention_copy<DV, LDV, BN, TH>(ctx, vs, v_base + kb * v_stride, v_stride, nk);
    ctx.cp_async_commit();

    // A warp whose rows all precede the tile's keys (causal) skips it; the barriers stay shared.
    const bool warp_active =
        !Masked || p.kind != ring_step_kind::diagonal ||
        kb <= block_facts().row0 - block_facts().seq.base + static_cast<int>(warp) * WR + WR - 1;
    simt::mma_accumulator sc[MW * NT];
    if (warp_active) {
      DCPP_UNROLL
      for (int nt = 0; nt < MW * NT; ++nt)
        sc[nt] = {};
      detail::attention_gemm_abt<DQK, NT, MW>(ctx, sc, qs + warp * WR * LDQ, LDQ, ks, LDQ);
      const detail::attention_block mb = Masked ? block_facts() : detail::attention_block{};
      const int mrow = mb.row0 - mb.seq.base + static_cast<int>(warp) * WR;
      if (Masked && (kb + BN > k_hi || mb.seq.keys_padded(kb, kb + BN) ||
                     (p.kind == ring_step_kind::diagonal && kb + BN - 1 > mrow))) {
        DCPP_UNROLL
        for (int mw = 0; mw < MW; ++mw) {
          DCPP_UNROLL
          for (int nt = 0; nt < NT; ++nt) {
            DCPP_UNROLL
            for (int e = 0; e < 4; ++e) {
              const simt::mma_coord c = simt::mma_c_coord(lane, e);
              const int i = mrow + mw * 16 + c.row, j = kb + nt * 8 + c.col;
              const bool visible =
                  j < k_hi && mb.seq.key_real(j) && (p.kind != ring_step_kind::diagonal || j <= i);
              if (!visible)
                sc[mw * NT + nt].x[e] = detail::attention_neg_inf();
            }
          }
        }
      }
      // Online softmax in base 2.
      float mx[2 * MW];
      DCPP_UNROLL
      for (int r = 0; r < 2 * MW; ++r)
        mx[r] = m[r];
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        DCPP_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          DCPP_UNROLL
          for (int e = 0; e < 4; ++e) {
            float& x = mx[2 * mw + (e >> 1)];
            x = detail::attention_max(x, sc[mw * NT + nt].x[e] * scale2);
          }
        }
      }
      float base[2 * MW];
      DCPP_UNROLL
      for (int r = 0; r < 2 * MW; ++r) {
        mx[r] = detail::attention_quad_max(ctx, mx[r]);
        // a row with nothing visible yet keeps max -inf; subtracting 0 instead gives exp2(-inf)
        base[r] = mx[r] == detail::attention_neg_inf() ? 0.0f : mx[r];
        const float alpha = detail::attention_exp2(m[r] - base[r]);
        m[r] = mx[r];
        l[r] *= alpha;
        DCPP_UNROLL
        for (int dt = 0; dt < DT; ++dt) {
          acc[(r >> 1) * DT + dt].x[2 * (r & 1)] *= alpha;
          acc[(r >> 1) * DT + dt].x[2 * (r & 1) + 1] *= alpha;
        }
      }
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        DCPP_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          DCPP_UNROLL
          for (int e = 0; e < 4; ++e) {
            const int r = 2 * mw + (e >> 1);
            const float pv = detail::attention_exp2(sc[mw * NT + nt].x[e] * scale2 - base[r]);
            l[r] += pv;
            sc[mw * NT + nt].x[e] = pv;
          }
        }
      }
    }
    ctx.template cp_async_wait<0>();
    ctx.sync_block(); // V_t is in; every warp is done with K_t
    if (t + 1 < n_tiles) {
      const int kn = kb + BN;
      detail::attention_copy<DQK, LDQ, BN, TH>(ctx, ks, k_base + kn * k_stride, k_stride,
                                               detail::attention_min(BN, k_hi - kn));
      ctx.cp_async_commit();
    }
    if (warp_active) {
      if constexpr (Masked) {
        // V's infinities and NaNs go in only for the pairs that see them: a masked pair's P is 0,
        // and 0 x NaN in the product would reach rows that never see that key
        bool nonfinite = false;
        detail::attention_gemm_pb<BN, DT, MW, true>(ctx, acc, sc, vs, LDV, warp_staging, cfg::pld,
                                                    &nonfinite);
        float any = nonfinite ? 1.0f : 0.0f;
        DCPP_UNROLL
        for (int mask = 1; mask < 32; mask *= 2)
          any = detail::attention_max(any, ctx.shuffle_xor(any, mask));
        if (any != 0.0f) {
          const detail::attention_block vb = block_facts();
          const int vrow = vb.row0 - vb.seq.base + static_cast<int>(warp) * WR;
          detail::attention_add_nonfinite<BN, DV, MW, T>(
              ctx, acc, sc, vs, LDV, nk, [&](int i, int k) {
                const int j = kb + k;
                return j < k_hi && vb.seq.key_real(j) &&
                       (p.kind != ring_step_kind::diagonal || j <= vrow + i);
              });
        }
      } else {
        detail::attention_gemm_pb<BN, DT, MW>(ctx, acc, sc, vs, LDV, warp_staging, cfg::pld);
      }
    }
  };
  // The leading tiles before the first boundary (the diagonal at the block's first row, the
  // padding gap after the first half's real keys, the end of the keys) need no mask.
  int boundary = k_hi;
  if (sq.kr0 < sq.chunk)
    boundary = detail::attention_min(boundary, sq.kr0);
  if (p.kind == ring_step_kind::diagonal)
    boundary = detail::attention_min(boundary, row0 - sq.base + 1);
  const int n_clean = boundary > k_lo ? detail::attention_min((boundary - k_lo) / BN, n_tiles) : 0;
  int t = 0;
  DCPP_NO_UNROLL
  for (; t < n_clean; ++t)
    step(t, std::false_type{});
  DCPP_NO_UNROLL
  for (; t < n_tiles; ++t)
    step(t, std::true_type{});
  ctx.template cp_async_wait<0>(); // no copy outlives the block

  const detail::attention_block eb = block_facts();
  const int erow = eb.row0 - eb.seq.base + static_cast<int>(warp) * WR;
  DCPP_UNROLL
  for (int r = 0; r < 2 * MW; ++r) {
    l[r] = detail::attention_quad_sum(ctx, l[r]);
    const int i = erow + detail::attention_fragment_row(r, g); // local row
    const int row = eb.seq.base + i;
    float* lse = p.lse + static_cast<std::int64_t>(row) * p.heads + h;
    // Merged (p.merge): o = (o_old w_old + O w) / (w_old + w) with w = e^{lse - max}. The quad's
    // first lane reads the old LSE and shares it (every lane of the warp takes part in the
    // shuffle), so that its write below cannot overtake another lane's read.
    float old_lse = 0.0f;
    if (p.merge) {
      old_lse = lane % 4 == 0 && row < eb.row1 ? *lse : 0.0f;
      old_lse = ctx.shuffle(old_lse, static_cast<int>(lane & ~3u));
    }
    if (row >= eb.row1)
      continue;
    // a NaN sum (a NaN score) is live: its O and LSE come out NaN, not 0 and -inf
    bool live = !(l[r] <= 0.0f) && eb.seq.query_real(i);
    float sum = l[r];
    if (!live && eb.seq.query_real(i) && detail::attention_row_sees_key(p.kind, eb.seq, i)) {
      // the row sees keys, yet every score was -inf: fp32 overflowed (or Q or K held an
      // infinity), and O = 0 with LSE -inf would be finite and wrong without a word
      live = true;
      sum = detail::attention_nan();
    }
    float* o = p.o + row * o_stride + h * DV + 2 * static_cast<int>(lane % 4);
    const float part_lse = live ? m[r] * detail::attention_ln2 + detail::attention_log(sum)
                                : detail::attention_neg_inf();
    float w_old = 0.0f, w_new = live ? 1.0f / sum : 0.0f, out_lse = part_lse; // O = acc / l
    if (p.merge) {
      const float mx = detail::attention_max(old_lse, part_lse);
      if (mx == detail::attention_neg_inf()) { // neither part sees a key: O stays 0
        w_old = 1.0f, w_new = 0.0f, out_lse = mx;
      } else {
        const float a = detail::attention_exp2((old_lse - mx) * detail::attention_log2e);
        const float b = detail::attention_exp2((part_lse - mx) * detail::attention_log2e);
        w_old = a / (a + b);
        w_new = live ? b / (a + b) / l[r] : 0.0f;
        out_lse = mx + detail::attention_log(a + b);
      }
    }
    DCPP_UNROLL
    for (int dt = 0; dt < DT; ++dt) {
      const simt::mma_accumulator& a = acc[(r >> 1) * DT + dt];
      if (p.merge)
        detail::attention_blend2(o + dt * 8, w_old, a.x[2 * (r & 1)] * w_new,
                                 a.x[2 * (r & 1) + 1] * w_new);
      else
        detail::attention_store2(o + dt * 8, a.x[2 * (r & 1)] * w_new,
                                 a.x[2 * (r & 1) + 1] * w_new);
    }
    if (lane % 4 == 0)
      *lse = out_lse;
  }
}

//! Merge of a step's partial (o_part, lse_part) into the running result (o, lse) through the
//! LSE, in fp32, for the rows of the work list: block (tile, head), any thread count.
template <int D>
struct attention_merge_params {
  float* o = nullptr;   //!< running O [tokens, heads, D]
  float* lse = nullptr; //!< running LSE [tokens, heads]
  const float* o_part = nullptr;
  const float* lse_part = nullptr;
  int heads = 0;
  attention_tiles tiles;
};

template <int D, class Ctx>
DCPP_HOST_DEVICE void attention_merge_body(Ctx& ctx, const attention_merge_params<D>& p) {
  const int tile = static_cast<int>(ctx.block_index().x), h = static_cast<int>(ctx.block_index().y);
  const int row0 = p.tiles.begin[tile], rows = p.tiles.end[tile] - row0;
  const int threads = static_cast<int>(ctx.block_dim().volume());
  const std::int64_t stride = static_cast<std::int64_t>(p.heads) * D;
  for (int idx = static_cast<int>(simt::thread_rank(ctx)); idx < rows * D; idx += threads) {
    const std::int64_t row = row0 + idx / D, at = row * p.heads + h;
    const float a = p.lse[at], b = p.lse_part[at];
    const float mx = detail::attention_max(a, b);
    if (mx == detail::attention_neg_inf())
      continue; // neither part sees a key: O stays 0
    const float wa = detail::attention_exp2((a - mx) * detail::attention_log2e);
    const float wb = detail::attention_exp2((b - mx) * detail::attention_log2e);
    float* o = p.o + row * stride + h * D + idx % D;
    *o = (*o * wa + p.o_part[row * stride + h * D + idx % D] * wb) / (wa + wb);
  }
  ctx.sync_block(); // every thread has read the old LSE
  for (int r = static_cast<int>(simt::thread_rank(ctx)); r < rows; r += threads) {
    const std::int64_t at = static_cast<std::int64_t>(row0 + r) * p.heads + h;
    const float a = p.lse[at], b = p.lse_part[at];
    const float mx = detail::attention_max(a, b);
    if (mx == detail::attention_neg_inf())
      continue;
    p.lse[at] =
        mx + detail::attention_log(detail::attention_exp2((a - mx) * detail::attention_log2e) +
                                   detail::attention_exp2((b - mx) * detail::attention_log2e));
  }
}

} // namespace dcpp::kernels
