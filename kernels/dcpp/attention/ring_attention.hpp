// THD ring attention, the kernel bodies (device-safe, SIMT layer): the per-step partial attention
// (forward), the LSE merge, and the backward (row sums D = rowsum(dO * O), dQ, dK/dV), over a
// packed buffer whose samples are split in zigzag chunks over a CP group (DESIGN.md section 2).
//
// Every rank of a group holds the same local geometry: local sequence s occupies rows
// [offset[s], offset[s+1]), its first half is the rank's chunk r, its second half chunk 2cp-1-r.
// A ring step pairs the rank's Q with the K/V of one rank of the group (the KV owner):
//   diagonal  the rank's own K/V: causal over the two local chunks (local order = global order);
//   lower     K/V of an earlier rank: every Q row sees the first half of K/V (no mask);
//   upper     K/V of a later rank: the second half of Q sees all of K/V (no mask).
// Real tokens are a prefix of each sample, hence of each chunk: `q_real` / `kv_real` give the
// real rows of each half; padding keys are never visible and padding queries see nothing (O = 0,
// LSE = -inf). Tiles: each block runs one row range of one sequence (a work list built on the
// host) for one head; warps own 16 rows and use the m16n8k16 warp matrix instruction for 16-bit
// inputs, fp32 FMAs with the same fragment layout for fp32 inputs. Accumulation is fp32.
// Wrapped for CUDA in ring_attention.cuh, run on the CPU by dcpp/attention/ring_attention.hpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dcpp/core/config.hpp"
#include "dcpp/core/float16.hpp"
#include "dcpp/core/simt.hpp"

namespace dcpp::kernels {

//! Which part of the causal matrix a ring step covers (see the file comment).
enum class ring_step_kind : int { diagonal = 0, lower = 1, upper = 2 };

//! Local geometry of the group's buffers: `offset` [sequences + 1] first local row of each
//! sequence (even lengths: two equal halves); `q_real` / `kv_real` [2 * sequences] real rows of
//! each half on this rank / on the KV owner.
struct attention_layout {
  const std::int32_t* offset = nullptr;
  const std::int32_t* q_real = nullptr;
  const std::int32_t* kv_real = nullptr;
  int sequences = 0;
};

//! A work list: tile t covers local rows [begin[t], end[t]) of sequence seq[t].
struct attention_tiles {
  const std::int32_t* seq = nullptr;
  const std::int32_t* begin = nullptr;
  const std::int32_t* end = nullptr;
  int count = 0;
};

//! Parameters of the attention kernels. Q/O/dO/dQ are [tokens, heads, D], K/V/dK/dV
//! [tokens, kv_heads, D] (heads a multiple of kv_heads: GQA/MQA), LSE and D [tokens, heads], all
//! row-major; `scale` multiplies QK^T before the softmax (natural base).
template <class T>
struct attention_params {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  float* o = nullptr;      //!< forward: partial O of the step's rows (fp32)
  float* lse = nullptr;    //!< forward: its LSE (natural log), -inf where no key is visible
  const T* out = nullptr;  //!< backward: the final O
  const T* dout = nullptr; //!< backward: dO
  const float* lse_final = nullptr; //!< backward: the final LSE
  float* dsum = nullptr;            //!< backward: rowsum(dO * O) [tokens, heads]
  float* dq = nullptr;              //!< backward: dQ accumulator (the step adds its part)
  float* dk = nullptr;              //!< backward: dK accumulator of the KV owner's rows
  float* dv = nullptr;              //!< backward: dV accumulator of the KV owner's rows
  std::int64_t tokens = 0;
  int heads = 0, kv_heads = 0;
  float scale = 1.0f;
  ring_step_kind kind = ring_step_kind::diagonal;
  attention_layout layout;
  attention_tiles tiles;
};

//! Tile sizes: 4 warps of 16 rows; inner tiles of 64 (head dim 64) or 32 (head dim 128) rows so
//! that the fragments of S and O stay in registers. Shared-memory rows are padded by 16 bytes
//! (`ld`, `pld`) so that the 8 rows a fragment load touches fall in distinct banks. Chosen by
//! register/shared-memory budget, not by a device measurement (none available).
template <int D, class T>
struct attention_tile {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr int warps = 4;
  static constexpr int threads = warps * simt::warp_size;
  static constexpr int rows = 16 * warps;         //!< rows per block (queries, or keys in dK/dV)
  static constexpr int inner = D <= 64 ? 64 : 32; //!< rows per inner step (keys, or queries)
  static constexpr int pad = 16 / static_cast<int>(sizeof(T));
  static constexpr int ld = D + pad;      //!< row stride of the Q/K/V/dO tiles
  static constexpr int pld = inner + pad; //!< row stride of the per-warp P / dS tiles
  //! Dynamic shared memory of each kernel, in bytes.
  static constexpr std::size_t forward_shared =
      (rows * ld + 2 * inner * ld + warps * 16 * pld) * sizeof(T);
  static constexpr std::size_t dq_shared =
      (2 * rows * ld + 2 * inner * ld + warps * 16 * pld) * sizeof(T);
  static constexpr std::size_t dkv_shared =
      (2 * rows * ld + 2 * inner * ld + 2 * warps * 16 * pld) * sizeof(T) +
      2 * inner * sizeof(float);
};

namespace detail {

DCPP_HOST_DEVICE constexpr float attention_neg_inf() noexcept {
  return -__builtin_huge_valf();
}
inline constexpr float attention_log2e = 1.4426950408889634f;
inline constexpr float attention_ln2 = 0.6931471805599453f;

DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_exp2(float x) {
#if defined(__CUDA_ARCH__)
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_log(float x) {
#if defined(__CUDA_ARCH__)
  return logf(x);
#else
  return std::log(x);
#endif
}
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_max(float a, float b) {
  return a > b ? a : b;
}

//! Whether local row `i` of sequence s (0 .. 2*chunk-1) is real, given the halves' real rows.
DCPP_HOST_DEVICE DCPP_FORCE_INLINE bool attention_real(const std::int32_t* real, int s, int chunk,
                                                       int i) {
  const int half = i >= chunk ? 1 : 0;
  return i - half * chunk < real[2 * s + half];
}

//! Whether query row i sees key row j (local rows of sequence s) in a step of kind `kind`.
DCPP_HOST_DEVICE DCPP_FORCE_INLINE bool
attention_visible(const attention_layout& l, ring_step_kind kind, int s, int chunk, int i, int j) {
  if (kind == ring_step_kind::diagonal && j > i)
    return false;
  if (kind == ring_step_kind::lower && j >= chunk)
    return false;
  if (kind == ring_step_kind::upper && i < chunk)
    return false;
  return attention_real(l.q_real, s, chunk, i) && attention_real(l.kv_real, s, chunk, j);
}

//! Key rows [lo, hi) a query row range [q0, q1) of a sequence of `len` rows needs.
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_key_range(ring_step_kind kind, int len, int q1,
                                                            int& lo, int& hi) {
  lo = 0;
  hi = kind == ring_step_kind::lower ? len / 2 : len;
  if (kind == ring_step_kind::diagonal)
    hi = q1 < len ? q1 : len;
}

//! Query rows [lo, hi) a key row range [k0, k1) of a sequence of `len` rows is seen by.
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_query_range(ring_step_kind kind, int len, int k0,
                                                              int& lo, int& hi) {
  hi = len;
  lo = kind == ring_step_kind::upper ? len / 2 : 0;
  if (kind == ring_step_kind::diagonal)
    lo = k0;
}

//! Copies `rows` rows of D elements (row stride `stride` elements) to shared `dst` [cap x LD];
//! rows past `rows` become zero. Every thread of the block takes part.
template <int D, int LD, class T, class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_load(Ctx& ctx, T* dst, const T* src,
                                                       std::int64_t stride, int rows, int cap) {
  const int threads = static_cast<int>(ctx.block_dim().volume());
  for (int idx = static_cast<int>(simt::thread_rank(ctx)); idx < cap * D; idx += threads) {
    const int r = idx / D, d = idx % D;
    dst[r * LD + d] = r < rows ? src[r * stride + d] : from_float<T>(0.0f);
  }
}

//! The 32-bit word holding elements i and i+1 (i even) of a 16-bit shared array.
template <class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE std::uint32_t attention_pair(const T* p, int i) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const std::uint32_t*>(p + i);
#else
  std::uint32_t w;
  std::memcpy(&w, p + i, sizeof w);
  return w;
#endif
}

//! C (16 x 8, fragment `acc`) += A (16 x 16 at `a`, row stride `lda`) * B, where B(k, n) is at
//! `b[k * bk + n * bn]`; every operand in shared memory. 16-bit types use the warp matrix
//! instruction; fp32 computes the same fragment with FMAs (fp32 products, k order).
template <class T, class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_mma(Ctx& ctx, simt::mma_accumulator& acc,
                                                      const T* a, int lda, const T* b, int bk,
                                                      int bn) {
  const unsigned lane = simt::lane_of(ctx);
  if constexpr (std::is_same_v<T, float>) {
    DCPP_UNROLL
    for (int e = 0; e < 4; ++e) {
      const simt::mma_coord c = simt::mma_c_coord(lane, e);
      float s = acc.x[e];
      DCPP_UNROLL
      for (int k = 0; k < 16; ++k)
        s += a[c.row * lda + k] * b[k * bk + c.col * bn];
      acc.x[e] = s;
    }
  } else {
    // Elements 2i and 2i+1 of a fragment are adjacent columns (A) or rows (B): one 32-bit load
    // where they are adjacent in memory (A always; B when bk == 1, i.e. B is stored transposed).
    simt::mma_a_fragment fa;
    DCPP_UNROLL
    for (int i = 0; i < 4; ++i) {
      const simt::mma_coord lo = simt::mma_a_coord(lane, 2 * i);
      fa.x[i] = attention_pair(a, lo.row * lda + lo.col);
    }
    simt::mma_b_fragment fb;
    DCPP_UNROLL
    for (int i = 0; i < 2; ++i) {
      const simt::mma_coord lo = simt::mma_b_coord(lane, 2 * i),
                            hi = simt::mma_b_coord(lane, 2 * i + 1);
      fb.x[i] = bk == 1
                    ? attention_pair(b, lo.row + lo.col * bn)
                    : simt::mma_pack(b[lo.row * bk + lo.col * bn], b[hi.row * bk + hi.col * bn]);
    }
    acc = ctx.template mma_m16n8k16<T>(fa, fb, acc);
  }
}

//! Maximum / sum over the four lanes of a quad (the lanes holding one fragment row).
template <class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_quad_max(Ctx& ctx, float x) {
  x = attention_max(x, ctx.shuffle_xor(x, 1));
  return attention_max(x, ctx.shuffle_xor(x, 2));
}
template <class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_quad_sum(Ctx& ctx, float x) {
  x += ctx.shuffle_xor(x, 1);
  return x + ctx.shuffle_xor(x, 2);
}

} // namespace detail

//! Forward step: block (tile, head). Online softmax over the step's key tiles; writes the
//! partial O (fp32) and LSE of every row of the tile (O = 0, LSE = -inf where nothing is
//! visible). Launch: grid (tiles.count, heads), attention_tile::threads threads, forward_shared.
template <int D, class T, class Ctx>
DCPP_HOST_DEVICE void attention_forward_body(Ctx& ctx, const attention_params<T>& p) {
  using cfg = attention_tile<D, T>;
  constexpr int BM = cfg::rows, BN = cfg::inner, NT = BN / 8, DT = D / 8;
  constexpr int LD = cfg::ld, PLD = cfg::pld;
  const int tile = static_cast<int>(ctx.block_index().x), h = static_cast<int>(ctx.block_index().y);
  const int hk = h / (p.heads / p.kv_heads);
  const int s = p.tiles.seq[tile], row0 = p.tiles.begin[tile], row1 = p.tiles.end[tile];
  const int base = p.layout.offset[s], len = p.layout.offset[s + 1] - base, chunk = len / 2;
  T* qs = ctx.template shared_array<T>(BM * LD);
  T* ks = ctx.template shared_array<T>(BN * LD);
  T* vs = ctx.template shared_array<T>(BN * LD);
  T* ps_all = ctx.template shared_array<T>(cfg::warps * 16 * PLD);
  const unsigned lane = simt::lane_of(ctx), warp = simt::warp_of(ctx);
  T* ps = ps_all + warp * 16 * PLD;
  const std::int64_t q_stride = static_cast<std::int64_t>(p.heads) * D;
  const std::int64_t kv_stride = static_cast<std::int64_t>(p.kv_heads) * D;
  detail::attention_load<D, LD>(ctx, qs, p.q + row0 * q_stride + h * D, q_stride, row1 - row0, BM);

  int k_lo, k_hi;
  detail::attention_key_range(p.kind, len, row1 - base, k_lo, k_hi);
  const float scale2 = p.scale * detail::attention_log2e;
  float m[2] = {detail::attention_neg_inf(), detail::attention_neg_inf()}, l[2] = {0.0f, 0.0f};
  simt::mma_accumulator acc[DT];
  DCPP_UNROLL
  for (int dt = 0; dt < DT; ++dt)
    acc[dt] = {};
  const int my_row = row0 - base + static_cast<int>(warp) * 16; // local row of the warp's row 0

  for (int kb = k_lo; kb < k_hi; kb += BN) {
    const int nk = k_hi - kb < BN ? k_hi - kb : BN;
    ctx.sync_block(); // everyone is done with the previous K/V tile
    detail::attention_load<D, LD>(ctx, ks, p.k + (base + kb) * kv_stride + hk * D, kv_stride, nk,
                                  BN);
    detail::attention_load<D, LD>(ctx, vs, p.v + (base + kb) * kv_stride + hk * D, kv_stride, nk,
                                  BN);
    ctx.sync_block();
    simt::mma_accumulator sc[NT];
    DCPP_UNROLL
    for (int nt = 0; nt < NT; ++nt)
      sc[nt] = {};
    DCPP_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      DCPP_UNROLL
      for (int nt = 0; nt < NT; ++nt)
        detail::attention_mma<T>(ctx, sc[nt], qs + warp * 16 * LD + kk * 16, LD,
                                 ks + nt * 8 * LD + kk * 16, 1, LD);
    }
    float mx[2] = {m[0], m[1]};
    DCPP_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      DCPP_UNROLL
      for (int e = 0; e < 4; ++e) {
        const simt::mma_coord c = simt::mma_c_coord(lane, e);
        const int i = my_row + c.row, j = kb + nt * 8 + c.col;
        const bool vis = i < row1 - base && j < k_hi &&
                         detail::attention_visible(p.layout, p.kind, s, chunk, i, j);
        const float x = vis ? sc[nt].x[e] * scale2 : detail::attention_neg_inf();
        sc[nt].x[e] = x;
        mx[e >> 1] = detail::attention_max(mx[e >> 1], x);
      }
    }
    float alpha[2];
    DCPP_UNROLL
    for (int r = 0; r < 2; ++r) {
      mx[r] = detail::attention_quad_max(ctx, mx[r]);
      alpha[r] = mx[r] == detail::attention_neg_inf() ? 1.0f : detail::attention_exp2(m[r] - mx[r]);
      m[r] = mx[r];
      l[r] *= alpha[r];
    }
    DCPP_UNROLL
    for (int dt = 0; dt < DT; ++dt) {
      DCPP_UNROLL
      for (int e = 0; e < 4; ++e)
        acc[dt].x[e] *= alpha[e >> 1];
    }
    DCPP_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      DCPP_UNROLL
      for (int e = 0; e < 4; ++e) {
        const simt::mma_coord c = simt::mma_c_coord(lane, e);
        const float x = sc[nt].x[e];
        const float pv =
            x == detail::attention_neg_inf() ? 0.0f : detail::attention_exp2(x - m[e >> 1]);
        l[e >> 1] += pv;
        ps[c.row * PLD + nt * 8 + c.col] = from_float<T>(pv);
      }
    }
    ctx.sync_warp();
    DCPP_UNROLL
    for (int kk = 0; kk < BN / 16; ++kk) {
      DCPP_UNROLL
      for (int dt = 0; dt < DT; ++dt)
        detail::attention_mma<T>(ctx, acc[dt], ps + kk * 16, PLD, vs + kk * 16 * LD + dt * 8, LD,
                                 1);
    }
  }

  DCPP_UNROLL
  for (int r = 0; r < 2; ++r)
    l[r] = detail::attention_quad_sum(ctx, l[r]);
  DCPP_UNROLL
  for (int e = 0; e < 4; ++e) {
    const simt::mma_coord c = simt::mma_c_coord(lane, e);
    const int row = row0 + static_cast<int>(warp) * 16 + c.row;
    if (row >= row1)
      continue;
    const float inv = l[e >> 1] > 0.0f ? 1.0f / l[e >> 1] : 0.0f;
    DCPP_UNROLL
    for (int dt = 0; dt < DT; ++dt)
      p.o[row * q_stride + h * D + dt * 8 + c.col] = acc[dt].x[e] * inv;
    if (c.col == 0 && (e & 1) == 0)
      p.lse[static_cast<std::int64_t>(row) * p.heads + h] =
          l[e >> 1] > 0.0f ? m[e >> 1] * detail::attention_ln2 + detail::attention_log(l[e >> 1])
                           : detail::attention_neg_inf();
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

//! Backward dQ of a step: block (query tile, head); recomputes P from the final LSE, adds
//! scale * dS K to p.dq for the tile's rows. Launch like the forward, dq_shared bytes.
template <int D, class T, class Ctx>
DCPP_HOST_DEVICE void attention_dq_body(Ctx& ctx, const attention_params<T>& p) {
  using cfg = attention_tile<D, T>;
  constexpr int BM = cfg::rows, BN = cfg::inner, NT = BN / 8, DT = D / 8;
  constexpr int LD = cfg::ld, PLD = cfg::pld;
  const int tile = static_cast<int>(ctx.block_index().x), h = static_cast<int>(ctx.block_index().y);
  const int hk = h / (p.heads / p.kv_heads);
  const int s = p.tiles.seq[tile], row0 = p.tiles.begin[tile], row1 = p.tiles.end[tile];
  const int base = p.layout.offset[s], len = p.layout.offset[s + 1] - base, chunk = len / 2;
  T* qs = ctx.template shared_array<T>(BM * LD);
  T* dos = ctx.template shared_array<T>(BM * LD);
  T* ks = ctx.template shared_array<T>(BN * LD);
  T* vs = ctx.template shared_array<T>(BN * LD);
  T* ds_all = ctx.template shared_array<T>(cfg::warps * 16 * PLD);
  const unsigned lane = simt::lane_of(ctx), warp = simt::warp_of(ctx);
  T* ds = ds_all + warp * 16 * PLD;
  const std::int64_t q_stride = static_cast<std::int64_t>(p.heads) * D;
  const std::int64_t kv_stride = static_cast<std::int64_t>(p.kv_heads) * D;
  detail::attention_load<D, LD>(ctx, qs, p.q + row0 * q_stride + h * D, q_stride, row1 - row0, BM);
  detail::attention_load<D, LD>(ctx, dos, p.dout + row0 * q_stride + h * D, q_stride, row1 - row0,
                                BM);
  const int my_row = row0 - base + static_cast<int>(warp) * 16;
  float lse2[2], dsum[2];
  DCPP_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int row = base + my_row + static_cast<int>(lane / 4) + r * 8;
    const bool in = row < row1;
    lse2[r] =
        in ? p.lse_final[static_cast<std::int64_t>(row) * p.heads + h] * detail::attention_log2e
           : 0.0f;
    dsum[r] = in ? p.dsum[static_cast<std::int64_t>(row) * p.heads + h] : 0.0f;
  }
  int k_lo, k_hi;
  detail::attention_key_range(p.kind, len, row1 - base, k_lo, k_hi);
  const float scale2 = p.scale * detail::attention_log2e;
  simt::mma_accumulator acc[DT];
  DCPP_UNROLL
  for (int dt = 0; dt < DT; ++dt)
    acc[dt] = {};

  for (int kb = k_lo; kb < k_hi; kb += BN) {
    const int nk = k_hi - kb < BN ? k_hi - kb : BN;
    ctx.sync_block();
    detail::attention_load<D, LD>(ctx, ks, p.k + (base + kb) * kv_stride + hk * D, kv_stride, nk,
                                  BN);
    detail::attention_load<D, LD>(ctx, vs, p.v + (base + kb) * kv_stride + hk * D, kv_stride, nk,
                                  BN);
    ctx.sync_block();
    simt::mma_accumulator sc[NT], dp[NT];
    DCPP_UNROLL
    for (int nt = 0; nt < NT; ++nt)
      sc[nt] = {}, dp[nt] = {};
    DCPP_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      DCPP_UNROLL
      for (int nt = 0; nt < NT; ++nt) {
        detail::attention_mma<T>(ctx, sc[nt], qs + warp * 16 * LD + kk * 16, LD,
                                 ks + nt * 8 * LD + kk * 16, 1, LD);
        detail::attention_mma<T>(ctx, dp[nt], dos + warp * 16 * LD + kk * 16, LD,
                                 vs + nt * 8 * LD + kk * 16, 1, LD);
      }
    }
    DCPP_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      DCPP_UNROLL
      for (int e = 0; e < 4; ++e) {
        const simt::mma_coord c = simt::mma_c_coord(lane, e);
        const int i = my_row + c.row, j = kb + nt * 8 + c.col;
        const bool vis = i < row1 - base && j < k_hi &&
                         detail::attention_visible(p.layout, p.kind, s, chunk, i, j);
        const float pv = vis ? detail::attention_exp2(sc[nt].x[e] * scale2 - lse2[e >> 1]) : 0.0f;
        ds[c.row * PLD + nt * 8 + c.col] = from_float<T>(pv * (dp[nt].x[e] - dsum[e >> 1]));
      }
    }
    ctx.sync_warp();
    DCPP_UNROLL
    for (int kk = 0; kk < BN / 16; ++kk) {
      DCPP_UNROLL
      for (int dt = 0; dt < DT; ++dt)
        detail::attention_mma<T>(ctx, acc[dt], ds + kk * 16, PLD, ks + kk * 16 * LD + dt * 8, LD,
                                 1);
    }
  }
  DCPP_UNROLL
  for (int e = 0; e < 4; ++e) {
    const simt::mma_coord c = simt::mma_c_coord(lane, e);
    const int row = row0 + static_cast<int>(warp) * 16 + c.row;
    if (row >= row1)
      continue;
    DCPP_UNROLL
    for (int dt = 0; dt < DT; ++dt)
      p.dq[row * q_stride + h * D + dt * 8 + c.col] += acc[dt].x[e] * p.scale;
  }
}

//! Backward dK/dV of a step: block (key tile, KV head); loops over the KV head's query heads and
//! the query tiles that see the keys, adds scale * dS^T Q to p.dk and P^T dO to p.dv for the
//! tile's key rows. Launch: grid (tiles.count, kv_heads), threads as above, dkv_shared bytes.
template <int D, class T, class Ctx>
DCPP_HOST_DEVICE void attention_dkv_body(Ctx& ctx, const attention_params<T>& p) {
  using cfg = attention_tile<D, T>;
  constexpr int BN = cfg::rows, BM = cfg::inner, MT = BM / 8, DT = D / 8;
  constexpr int LD = cfg::ld, PLD = cfg::pld;
  const int tile = static_cast<int>(ctx.block_index().x),
            hk = static_cast<int>(ctx.block_index().y);
  const int group = p.heads / p.kv_heads;
  const int s = p.tiles.seq[tile], key0 = p.tiles.begin[tile], key1 = p.tiles.end[tile];
  const int base = p.layout.offset[s], len = p.layout.offset[s + 1] - base, chunk = len / 2;
  T* ks = ctx.template shared_array<T>(BN * LD);
  T* vs = ctx.template shared_array<T>(BN * LD);
  T* qs = ctx.template shared_array<T>(BM * LD);
  T* dos = ctx.template shared_array<T>(BM * LD);
  T* pt_all = ctx.template shared_array<T>(cfg::warps * 16 * PLD);
  T* dst_all = ctx.template shared_array<T>(cfg::warps * 16 * PLD);
  float* lse2_s = ctx.template shared_array<float>(BM);
  float* dsum_s = ctx.template shared_array<float>(BM);
  const unsigned lane = simt::lane_of(ctx), warp = simt::warp_of(ctx);
  T* pt = pt_all + warp * 16 * PLD;
  T* dst = dst_all + warp * 16 * PLD;
  const int threads = static_cast<int>(ctx.block_dim().volume());
  const std::int64_t q_stride = static_cast<std::int64_t>(p.heads) * D;
  const std::int64_t kv_stride = static_cast<std::int64_t>(p.kv_heads) * D;
  detail::attention_load<D, LD>(ctx, ks, p.k + key0 * kv_stride + hk * D, kv_stride, key1 - key0,
                                BN);
  detail::attention_load<D, LD>(ctx, vs, p.v + key0 * kv_stride + hk * D, kv_stride, key1 - key0,
                                BN);
  const int my_key = key0 - base + static_cast<int>(warp) * 16; // local key of the warp's row 0
  int q_lo, q_hi;
  detail::attention_query_range(p.kind, len, key0 - base, q_lo, q_hi);
  const float scale2 = p.scale * detail::attention_log2e;
  simt::mma_accumulator dk[DT], dv[DT];
  DCPP_UNROLL
  for (int dt = 0; dt < DT; ++dt)
    dk[dt] = {}, dv[dt] = {};

  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    for (int qb = q_lo; qb < q_hi; qb += BM) {
      const int nq = q_hi - qb < BM ? q_hi - qb : BM;
      ctx.sync_block();
      detail::attention_load<D, LD>(ctx, qs, p.q + (base + qb) * q_stride + h * D, q_stride, nq,
                                    BM);
      detail::attention_load<D, LD>(ctx, dos, p.dout + (base + qb) * q_stride + h * D, q_stride, nq,
                                    BM);
      for (int r = static_cast<int>(simt::thread_rank(ctx)); r < BM; r += threads) {
        const std::int64_t at = static_cast<std::int64_t>(base + qb + r) * p.heads + h;
        lse2_s[r] = r < nq ? p.lse_final[at] * detail::attention_log2e : 0.0f;
        dsum_s[r] = r < nq ? p.dsum[at] : 0.0f;
      }
      ctx.sync_block();
      simt::mma_accumulator st[MT], dpt[MT];
      DCPP_UNROLL
      for (int mt = 0; mt < MT; ++mt)
        st[mt] = {}, dpt[mt] = {};
      DCPP_UNROLL
      for (int kk = 0; kk < D / 16; ++kk) {
        DCPP_UNROLL
        for (int mt = 0; mt < MT; ++mt) {
          detail::attention_mma<T>(ctx, st[mt], ks + warp * 16 * LD + kk * 16, LD,
                                   qs + mt * 8 * LD + kk * 16, 1, LD);
          detail::attention_mma<T>(ctx, dpt[mt], vs + warp * 16 * LD + kk * 16, LD,
                                   dos + mt * 8 * LD + kk * 16, 1, LD);
        }
      }
      DCPP_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const simt::mma_coord c = simt::mma_c_coord(lane, e);
          const int j = my_key + c.row, qi = mt * 8 + c.col, i = qb + qi;
          const bool vis = j < key1 - base && i < q_hi &&
                           detail::attention_visible(p.layout, p.kind, s, chunk, i, j);
          const float pv = vis ? detail::attention_exp2(st[mt].x[e] * scale2 - lse2_s[qi]) : 0.0f;
          pt[c.row * PLD + qi] = from_float<T>(pv);
          dst[c.row * PLD + qi] = from_float<T>(pv * (dpt[mt].x[e] - dsum_s[qi]));
        }
      }
      ctx.sync_warp();
      DCPP_UNROLL
      for (int kk = 0; kk < BM / 16; ++kk) {
        DCPP_UNROLL
        for (int dt = 0; dt < DT; ++dt) {
          detail::attention_mma<T>(ctx, dv[dt], pt + kk * 16, PLD, dos + kk * 16 * LD + dt * 8, LD,
                                   1);
          detail::attention_mma<T>(ctx, dk[dt], dst + kk * 16, PLD, qs + kk * 16 * LD + dt * 8, LD,
                                   1);
        }
      }
    }
  }
  DCPP_UNROLL
  for (int e = 0; e < 4; ++e) {
    const simt::mma_coord c = simt::mma_c_coord(lane, e);
    const int key = key0 + static_cast<int>(warp) * 16 + c.row;
    if (key >= key1)
      continue;
    DCPP_UNROLL
    for (int dt = 0; dt < DT; ++dt) {
      p.dk[key * kv_stride + hk * D + dt * 8 + c.col] += dk[dt].x[e] * p.scale;
      p.dv[key * kv_stride + hk * D + dt * 8 + c.col] += dv[dt].x[e];
    }
  }
}

//! Element-wise fp32 -> T (final O, dQ, dK, dV), one thread per element.
template <class T, class Ctx>
DCPP_HOST_DEVICE void attention_convert_body(Ctx& ctx, const float* in, T* out, std::int64_t n) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i < n)
    out[i] = from_float<T>(in[i]);
}

//! Partition gather: local[row] = full[map[row]] (`width` elements per row), or `fill` where
//! map[row] < 0 (padding). One thread per element.
template <class T, class Ctx>
DCPP_HOST_DEVICE void partition_gather_body(Ctx& ctx, const T* full, const std::int64_t* map,
                                            T* local, std::int64_t rows, int width, T fill) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i >= rows * width)
    return;
  const std::int64_t src = map[i / width];
  local[i] = src >= 0 ? full[src * width + i % width] : fill;
}

//! Partition scatter: full[map[row]] = local[row] for real rows (map >= 0).
template <class T, class Ctx>
DCPP_HOST_DEVICE void partition_scatter_body(Ctx& ctx, const T* local, const std::int64_t* map,
                                             T* full, std::int64_t rows, int width) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i >= rows * width)
    return;
  const std::int64_t dst = map[i / width];
  if (dst >= 0)
    full[dst * width + i % width] = local[i];
}

} // namespace dcpp::kernels
