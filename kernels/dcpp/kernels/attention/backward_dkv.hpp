// THD ring attention, the backward's dK/dV of one ring step (FlashAttention-2's dK/dV loop).
#pragma once

#include "dcpp/kernels/attention/gemm.hpp"

namespace dcpp::kernels {

enum class attention_dkv_part : int { both = 0, dv = 1, dk = 2 };

//! Backward dK/dV of a step: block (key tile, KV head), FlashAttention-2's dK/dV loop. K and V
//! of the block stay in shared memory; for every query head of the KV head and every query tile
//! that sees the keys, S^T = K Q^T and dP^T = V dO^T give P^T and dS^T in registers, the A
//! operands of dV += P^T dO and dK += dS^T Q. Q, dO and their LSE/D rows are double-buffered (the
//! next tile loads during this one). Adds scale * dS^T Q to p.dk and P^T dO to p.dv for the
//! tile's key rows. Launch: grid (tiles.count, kv_heads), threads as above, dkv_shared bytes.
template <int DQK, int DV, class T, attention_dkv_part Part = attention_dkv_part::both, class Ctx>
DCPP_HOST_DEVICE void attention_dkv_body(Ctx& ctx, const attention_params<T>& p) {
  using cfg = attention_tile<DQK, DV, T>;
  constexpr int MW = cfg::backward_slices, WR = 16 * MW; // 16-row slices and key rows per warp
  constexpr int BN = cfg::backward_rows, BM = cfg::dkv_inner, MT = BM / 8, DTQ = DQK / 8,
                DTV = DV / 8;
  constexpr int LDQ = cfg::ldq, LDV = cfg::ldv, TH = cfg::threads;
  constexpr bool want_dv = Part != attention_dkv_part::dk, want_dk = Part != attention_dkv_part::dv;
  constexpr bool clean_instance = MW == 2 && Part != attention_dkv_part::both;
  const int tile = static_cast<int>(ctx.block_index().x),
            hk = static_cast<int>(ctx.block_index().y);
  const int group = p.heads / p.kv_heads;
  // The block's keys and sequence and the queries that see them, read again (L1 hits) where the
  // copies, the masks and the epilogue need them rather than kept live across the main loop,
  // where 32-row warps need every register (kept, they spilled 24-40 bytes at head dim 128).
  struct facts {
    detail::attention_block blk;
    int q_lo, q_hi;
    int per_head, n_masked; //!< query tiles per query head, and of those the ones that need a mask
    //! the block's query tiles over its group of query heads, and those that need no mask
    DCPP_HOST_DEVICE int tiles(int group) const { return per_head * group; }
    DCPP_HOST_DEVICE int clean_tiles(int group) const { return (per_head - n_masked) * group; }
  };
  const auto block_facts = [&p, tile] {
    facts f{detail::attention_block_of(p, tile), 0, 0, 0, 0};
    detail::attention_query_range(p.kind, f.blk.seq, f.blk.row0 - f.blk.seq.base, f.q_lo, f.q_hi);
    f.per_head = f.q_hi > f.q_lo ? (f.q_hi - f.q_lo + BM - 1) / BM : 0;
    // A padding key in the block masks every tile; the causal diagonal masks the tiles whose first
    // query precedes the block's last key (the query range starts at the block's first key).
    // Only the split dK and dV kernels of 32-row warps have a clean instance: beside the masked
    // one it spilled in the 16-row loops (head dims 192, 256) and at head dim 64 (dK and dV in
    // one kernel); those run every tile masked.
    const int k0 = f.blk.row0 - f.blk.seq.base;
    f.n_masked = !clean_instance || f.blk.seq.keys_padded(k0, k0 + BN) ? f.per_head
                 : p.kind == ring_step_kind::diagonal
                     ? detail::attention_min(f.per_head, (BN + BM - 2) / BM)
                     : 0;
    return f;
  };
  // The block's t-th query tile: first the tiles that need no mask, every query head's in turn,
  // then the masked ones (the query range's first n_masked tiles) of every head. Sets the query
  // head (within the KV head's group) and the tile's first query (local to the sequence).
  const auto query_tile = [group](const facts& f, int t, int& hh, int& qb) {
    const int n_clean = f.per_head - f.n_masked;
    if (t < n_clean * group) {
      hh = t / n_clean;
      qb = f.q_lo + (f.n_masked + t % n_clean) * BM;
    } else {
      t -= n_clean * group;
      hh = t / f.n_masked;
      qb = f.q_lo + (t % f.n_masked) * BM;
    }
  };
  T* ks = ctx.template shared_array<T>(BN * LDQ);
  T* vs = ctx.template shared_array<T>(BN * LDV);
  T* qs = ctx.template shared_array<T>(2 * BM * LDQ);
  T* dos = ctx.template shared_array<T>(2 * BM * LDV);
  T* staging = ctx.template shared_array<T>(cfg::staging);
  float* lse_s = ctx.template shared_array<float>(2 * BM);
  float* dsum_s = ctx.template shared_array<float>(2 * BM);
  const unsigned lane = simt::lane_of(ctx), warp = simt::warp_of(ctx);
  // row strides in elements ([tokens, heads, D]; < 2^31 for any real model), from the kernel
  // parameters wherever they are used rather than kept in registers
  const auto q_stride = [&p] { return p.heads * DQK; };
  const auto o_stride = [&p] { return p.heads * DV; };
  const int k_stride = p.kv_heads * DQK, v_stride = p.kv_heads * DV;

  {
    const facts f = block_facts();
    const int key0 = f.blk.row0, key1 = f.blk.row1;
    detail::attention_copy<DQK, LDQ, BN, TH>(
        ctx, ks, p.k + static_cast<std::int64_t>(key0) * k_stride + hk * DQK, k_stride,
        key1 - key0);
    if constexpr (want_dk) // V feeds dP^T, which only dK needs
      detail::attention_copy<DV, LDV, BN, TH>(
          ctx, vs, p.v + static_cast<std::int64_t>(key0) * v_stride + hk * DV, v_stride,
          key1 - key0);
  }
  auto issue = [&](int t, int stage) {
    const facts f = block_facts();
    const detail::attention_sequence& sq = f.blk.seq;
    int hh, qb;
    query_tile(f, t, hh, qb);
    const int h = hk * group + hh;
    const int nq = detail::attention_min(BM, f.q_hi - qb);
    const std::int64_t first = sq.base + qb;
    detail::attention_copy<DQK, LDQ, BM, TH>(ctx, qs + stage * BM * LDQ,
                                             p.q + first * q_stride() + h * DQK, q_stride(), nq);
    detail::attention_copy<DV, LDV, BM, TH>(ctx, dos + stage * BM * LDV,
                                            p.dout + first * o_stride() + h * DV, o_stride(), nq);
    for (int r = static_cast<int>(simt::thread_rank(ctx)); r < BM; r += TH)
      detail::attention_row_stats(p, sq, qb + r, sq.base + f.q_hi, h, lse_s[stage * BM + r],
                                  dsum_s[stage * BM + r]);
  };
  if (block_facts().per_head > 0)
    issue(0, 0);
  ctx.cp_async_commit();

  const float scale2 = p.scale * detail::attention_log2e;
  simt::mma_accumulator dk[want_dk ? MW * DTQ : 1], dv[want_dv ? MW * DTV : 1];
  DCPP_UNROLL
  for (int dt = 0; dt < (want_dk ? MW * DTQ : 1); ++dt)
    dk[dt] = {};
  DCPP_UNROLL
  for (int dt = 0; dt < (want_dv ? MW * DTV : 1); ++dt)
    dv[dt] = {};
  T* warp_staging = staging + warp * 16 * cfg::pld;

  // Query tile t (query_tile); Masked: it may cross the causal diagonal or the block's keys hold
  // padding. Two instances, so that the clean tiles' loop carries no mask code at all.
  const auto step = [&](int t, auto masked_tile) {
    constexpr bool Masked = decltype(masked_tile)::value;
    const int stage = t % 2;
    ctx.template cp_async_wait<0>();
    ctx.sync_block(); // tile t is in; every warp is done with tile t-1's buffers
    if (t + 1 < block_facts().tiles(group)) {
      issue(t + 1, stage ^ 1);
      ctx.cp_async_commit();
    }
    const T* qt = qs + stage * BM * LDQ;
    const T* dot = dos + stage * BM * LDV;
    const float* lse2 = lse_s + stage * BM;
    [[maybe_unused]] const float* dsum = dsum_s + stage * BM; // dK's
    const facts f = block_facts();
    const detail::attention_sequence& sq = f.blk.seq;
    int hh, qb;
    query_tile(f, t, hh, qb);
    const int warp_key = f.blk.row0 - sq.base + static_cast<int>(warp) * WR; // local key of row 0
    // causal: a warp whose keys all follow the tile's queries sees none of them
    if (Masked && p.kind == ring_step_kind::diagonal && qb + BM - 1 < warp_key)
      return;
    simt::mma_accumulator st[MW * MT];
    DCPP_UNROLL
    for (int mt = 0; mt < MW * MT; ++mt)
      st[mt] = {};
    detail::attention_gemm_abt<DQK, MT, MW>(ctx, st, ks + warp * WR * LDQ, LDQ, qt, LDQ);
    const bool masked = Masked && (sq.keys_padded(warp_key, warp_key + WR) ||
                                   (p.kind == ring_step_kind::diagonal && qb < warp_key + WR - 1));
    DCPP_UNROLL
    for (int mw = 0; mw < MW; ++mw) {
      DCPP_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const simt::mma_coord c = simt::mma_c_coord(lane, e);
          const int qi = mt * 8 + c.col;
          simt::mma_accumulator& x = st[mw * MT + mt];
          float pv = detail::attention_exp2(x.x[e] * scale2 - lse2[qi]);
          if (masked) {
            const int j = warp_key + mw * 16 + c.row, i = qb + qi;
            if (!(sq.key_real(j) && (p.kind != ring_step_kind::diagonal || j <= i)))
              pv = 0.0f;
          }
          x.x[e] = pv; // P^T
        }
      }
    }
    if constexpr (want_dv)
      detail::attention_gemm_pb<BM, DTV, MW>(ctx, dv, st, dot, LDV, warp_staging, cfg::pld);
    if constexpr (want_dk) {
      simt::mma_accumulator dpt[MW * MT];
      DCPP_UNROLL
      for (int mt = 0; mt < MW * MT; ++mt)
        dpt[mt] = {};
      detail::attention_gemm_abt<DV, MT, MW>(ctx, dpt, vs + warp * WR * LDV, LDV, dot, LDV);
      DCPP_UNROLL
      for (int mt = 0; mt < MW * MT; ++mt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int qi = (mt % MT) * 8 + simt::mma_c_coord(lane, e).col;
          const float ds = st[mt].x[e] * (dpt[mt].x[e] - dsum[qi]); // dS^T
          // a masked pair (P = 0) gives dS = 0 even when its query's dsum is NaN: 0 x NaN would
          // carry a NaN query row to keys it does not see (the masked instance only)
          dpt[mt].x[e] = Masked && masked && st[mt].x[e] == 0.0f ? 0.0f : ds;
        }
      }
      detail::attention_gemm_pb<BM, DTQ, MW>(ctx, dk, dpt, qt, LDQ, warp_staging, cfg::pld);
    }
  };
  int t = 0;
  DCPP_NO_UNROLL
  for (; t < block_facts().clean_tiles(group); ++t)
    step(t, std::false_type{});
  DCPP_NO_UNROLL
  for (; t < block_facts().tiles(group); ++t)
    step(t, std::true_type{});
  ctx.template cp_async_wait<0>(); // no copy outlives the block

  const int g = static_cast<int>(lane / 4), c2 = 2 * static_cast<int>(lane % 4);
  const facts f = block_facts();
  DCPP_UNROLL
  for (int r = 0; r < 2 * MW; ++r) {
    const std::int64_t key =
        f.blk.row0 + static_cast<int>(warp) * WR + detail::attention_fragment_row(r, g);
    const int e = 2 * (r & 1);
    if (key >= f.blk.row1)
      continue;
    if constexpr (want_dk) {
      DCPP_UNROLL
      for (int dt = 0; dt < DTQ; ++dt) {
        const simt::mma_accumulator& a = dk[(r >> 1) * DTQ + dt];
        detail::attention_add2(p.dk + key * k_stride + hk * DQK + dt * 8 + c2, a.x[e] * p.scale,
                               a.x[e + 1] * p.scale);
      }
    }
    if constexpr (want_dv) {
      DCPP_UNROLL
      for (int dt = 0; dt < DTV; ++dt) {
        const simt::mma_accumulator& a = dv[(r >> 1) * DTV + dt];
        detail::attention_add2(p.dv + key * v_stride + hk * DV + dt * 8 + c2, a.x[e], a.x[e + 1]);
      }
    }
  }
}

} // namespace dcpp::kernels
