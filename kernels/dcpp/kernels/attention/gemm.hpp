// THD ring attention, the tile operations: cp.async copies into shared memory, the warp matrix
// products Q K^T and P V (with the finite/non-finite split of V), and the vector stores of fp32
// partial results.
#pragma once

#include "dcpp/kernels/attention/block_info.hpp"

namespace dcpp::kernels {

namespace detail {

//! Copies `rows` rows of D elements (global row stride `stride` elements) into shared `dst`
//! [CAP x LD] with 16-byte cp.async; rows from `rows` to CAP become zero (cp.async's zero fill),
//! so masked keys multiply zeros, never poison. Every thread of the block issues its share; the
//! caller commits the group. Rows and the global buffers are 16-byte aligned (checked on entry
//! to the ring).
template <int D, int LD, int CAP, int THREADS, class T, class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_copy(Ctx& ctx, T* dst, const T* src,
                                                       std::int64_t stride, int rows) {
  constexpr int per_vector = 16 / static_cast<int>(sizeof(T));
  constexpr int per_row = D / per_vector;
  constexpr int total = CAP * per_row;
  const int first = static_cast<int>(simt::thread_rank(ctx));
  // a row stride is heads * D elements (< 2^21 for any real model) and CAP <= 128 rows: the
  // offsets fit 32 bits, which keeps one register per copy live across the main loop, not two
  const int stride32 = static_cast<int>(stride);
  DCPP_UNROLL
  for (int i = 0; i < (total + THREADS - 1) / THREADS; ++i) {
    const int idx = first + i * THREADS;
    if (total % THREADS == 0 || idx < total) {
      const int r = idx / per_row, c = (idx % per_row) * per_vector;
      const bool valid = r < rows;
      ctx.cp_async_16(dst + r * LD + c, src + (valid ? r * stride32 + c : 0), valid);
    }
  }
}

//! One ldmatrix.x4 of B (two n-tiles: registers 0-1 and 2-3) against the A fragments of MW
//! 16-row slices: acc[mw * stride] and acc[mw * stride + 1] += A_mw B.
template <int MW, class T, class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_mma_slices(Ctx& ctx, const simt::mma_a_fragment (&af)[MW],
                     const simt::ldmatrix_fragment<4>& fb, simt::mma_accumulator* acc, int stride) {
  DCPP_UNROLL
  for (int mw = 0; mw < MW; ++mw) {
    simt::mma_accumulator* c = acc + mw * stride;
    c[0] = ctx.template mma_m16n8k16<T>(af[mw], {{fb.x[0], fb.x[1]}}, c[0]);
    c[1] = ctx.template mma_m16n8k16<T>(af[mw], {{fb.x[2], fb.x[3]}}, c[1]);
  }
}

//! acc[mw * NT + nt] (16 x 8 each) += A B^T over K columns: A is MW * 16 rows of `a` (stride
//! lda), B the NT * 8 rows of `b` (stride ldb); both row-major in shared memory, the reduction
//! along their rows (S = Q K^T, dP = dO V^T, S^T = K Q^T, ...). 16-bit inputs: per 16 columns
//! one ldmatrix.x4 for each 16-row slice of A and one per pair of n-tiles of B, each B fragment
//! feeding MW mma.sync (MW = 2 halves B's shared-memory traffic per instruction). fp32: the same
//! fragments computed with FMAs from shared memory (fp32 products, k order).
template <int K, int NT, int MW = 1, class T, class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_gemm_abt(Ctx& ctx, simt::mma_accumulator* acc, const T* a, int lda, const T* b, int ldb) {
  static_assert(K % 16 == 0 && NT % 2 == 0);
  const unsigned lane = simt::lane_of(ctx);
  if constexpr (std::is_same_v<T, float>) {
    DCPP_UNROLL
    for (int mw = 0; mw < MW; ++mw) {
      DCPP_UNROLL
      for (int nt = 0; nt < NT; ++nt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const simt::mma_coord c = simt::mma_c_coord(lane, e);
          const float* ar = a + (mw * 16 + c.row) * lda;
          const float* br = b + (nt * 8 + c.col) * ldb;
          float s = acc[mw * NT + nt].x[e];
          DCPP_NO_UNROLL
          for (int k = 0; k < K; ++k)
            s += ar[k] * br[k];
          acc[mw * NT + nt].x[e] = s;
        }
      }
    }
  } else {
    const int l = static_cast<int>(lane);
    // A: lanes 0-15 address rows 0-15 at column 0, lanes 16-31 the same rows at column 8;
    // B: lanes 8m..8m+7 address rows (l % 8) + 8 (m / 2) at column 8 (m % 2).
    const T* a_row = a + (l % 16) * lda + 8 * (l / 16);
    const T* b_row = b + (l % 8 + 8 * (l / 16)) * ldb + 8 * ((l / 8) % 2);
    DCPP_UNROLL
    for (int kk = 0; kk < K / 16; ++kk) {
      simt::mma_a_fragment af[MW];
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        const auto fa = ctx.template ldmatrix<4, false>(a_row + mw * 16 * lda + kk * 16);
        af[mw] = {{fa.x[0], fa.x[1], fa.x[2], fa.x[3]}};
      }
      DCPP_UNROLL
      for (int np = 0; np < NT / 2; ++np) {
        const auto fb = ctx.template ldmatrix<4, false>(b_row + np * 16 * ldb + kk * 16);
        attention_mma_slices<MW, T>(ctx, af, fb, acc + 2 * np, NT);
      }
    }
  }
}

//! `x` (two 16-bit T, as ldmatrix returns them) with each infinity or NaN set to +0; `found`
//! set when there was one (all exponent bits set: 0x7c00 in half, 0x7f80 in bfloat16).
template <class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE std::uint32_t attention_finite_pair(std::uint32_t x,
                                                                       bool& found) {
  constexpr std::uint32_t e = std::is_same_v<T, half> ? 0x7c00u : 0x7f80u;
  const bool low = (x & e) == e, high = ((x >> 16) & e) == e;
  found = found || low || high;
  return x & (low ? 0xffff0000u : 0xffffffffu) & (high ? 0x0000ffffu : 0xffffffffu);
}

//! After attention_gemm_pb<..., Finite = true> took B's infinities and NaNs as 0: adds
//! P[i, k] B[k, d] for each such B[k, d] (k < keys) to the rows i of the warp that see key k
//! (`visible(i, k)`, i the row in the warp's MW * 16, k the key in the tile), and to no other.
//! Warp-wide and uniform: every lane reads each element of B (a broadcast), the weight comes from
//! the quad lane holding column k. Taken only when the tile holds such a value, which normal
//! training never gives, so it is written for exactness, not speed.
template <int K, int DV, int MW, class T, class Ctx, class Visible>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_add_nonfinite(Ctx& ctx, simt::mma_accumulator* acc, const simt::mma_accumulator* pfrag,
                        const T* b, int ldb, int keys, const Visible& visible) {
  constexpr int KT = K / 8, DT = DV / 8;
  const unsigned lane = simt::lane_of(ctx);
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  DCPP_NO_UNROLL
  for (int k = 0; k < keys; ++k) {
    DCPP_NO_UNROLL
    for (int d = 0; d < DV; ++d) {
      const float x = to_float(b[k * ldb + d]);
      if (x - x == 0.0f)
        continue; // finite: already in the product
      const bool odd_key = k % 2 != 0, odd_column = d % 2 != 0;
      const int key_tile = k / 8, column_tile = d / 8;
      const bool my_column = t == (d % 8) / 2;
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        DCPP_UNROLL
        for (int h = 0; h < 2; ++h) {
          // P[g + 8h, k] lives in lane 4g + (k % 8) / 2, element 2h + k % 2 of fragment k / 8;
          // selects, not indexing, keep the fragments in registers
          float mine = 0.0f;
          DCPP_UNROLL
          for (int nt = 0; nt < KT; ++nt) {
            const simt::mma_accumulator& f = pfrag[mw * KT + nt];
            mine = nt == key_tile ? (odd_key ? f.x[2 * h + 1] : f.x[2 * h]) : mine;
          }
          const float w = ctx.shuffle(mine, 4 * g + (k % 8) / 2);
          // P as the product took it: rounded to T for mma.sync
          const float add = to_float(from_float<T>(w)) * x;
          const bool here = my_column && visible(mw * 16 + g + 8 * h, k);
          DCPP_UNROLL
          for (int dt = 0; dt < DT; ++dt) {
            simt::mma_accumulator& c = acc[mw * DT + dt];
            const bool hit = here && dt == column_tile;
            c.x[2 * h] = hit && !odd_column ? c.x[2 * h] + add : c.x[2 * h];
            c.x[2 * h + 1] = hit && odd_column ? c.x[2 * h + 1] + add : c.x[2 * h + 1];
          }
        }
      }
    }
  }
}

//! acc[mw * DT + dt] (16 x 8 each) += P B, where P (MW * 16 x K) is held in registers as K/8
//! accumulator fragments per 16-row slice (pfrag[mw * K/8 + nt], the S-shaped output of
//! attention_gemm_abt) and B (K x DT*8) is row-major in shared memory at `b` (stride ldb):
//! O += P V, dQ += dS K, dV += P^T dO, ... 16-bit inputs: the accumulators of n-tiles 2kk and
//! 2kk+1 are exactly the A fragment of the k-slice kk (rows g, g+8; columns 2t, 2t+1 and +8), so
//! P never leaves registers; B comes by ldmatrix.x4.trans, two n-tiles per load, each feeding MW
//! mma.sync. fp32: P goes through the warp's 16-row `staging` tile, one slice at a time.
//! `Finite`: B's infinities and NaNs count as 0, and `*nonfinite` is set on a lane that met one
//! (a masked tile's P holds exact zeros for pairs that do not see each other, and 0 x NaN inside
//! the product would reach rows that never see that key; attention_add_nonfinite adds the
//! values back for the pairs that do).
template <int K, int DT, int MW = 1, bool Finite = false, class T, class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_gemm_pb(Ctx& ctx, simt::mma_accumulator* acc, const simt::mma_accumulator* pfrag,
                  const T* b, int ldb, T* staging, int sld, bool* nonfinite = nullptr) {
  static_assert(K % 16 == 0 && DT % 2 == 0);
  constexpr int KT = K / 8;
  const unsigned lane = simt::lane_of(ctx);
  if constexpr (std::is_same_v<T, float>) {
    DCPP_UNROLL
    for (int mw = 0; mw < MW; ++mw) {
      DCPP_UNROLL
      for (int nt = 0; nt < KT; ++nt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const simt::mma_coord c = simt::mma_c_coord(lane, e);
          staging[c.row * sld + nt * 8 + c.col] = pfrag[mw * KT + nt].x[e];
        }
      }
      ctx.sync_warp();
      DCPP_UNROLL
      for (int dt = 0; dt < DT; ++dt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const simt::mma_coord c = simt::mma_c_coord(lane, e);
          float s = acc[mw * DT + dt].x[e];
          DCPP_NO_UNROLL
          for (int k = 0; k < K; ++k) {
            float bv = b[k * ldb + dt * 8 + c.col];
            if constexpr (Finite)
              if (!(bv - bv == 0.0f)) // inf or NaN
                *nonfinite = true, bv = 0.0f;
            s += staging[c.row * sld + k] * bv;
          }
          acc[mw * DT + dt].x[e] = s;
        }
      }
      ctx.sync_warp(); // the staging tile is rewritten next
    }
  } else {
    const int l = static_cast<int>(lane);
    // lanes 8m..8m+7 address rows (l % 8) + 8 (m % 2) at column 8 (m / 2): with .trans the four
    // matrices are B's (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
    const T* b_row = b + (l % 8 + 8 * ((l / 8) % 2)) * ldb + 8 * (l / 16);
    DCPP_UNROLL
    for (int kk = 0; kk < K / 16; ++kk) {
      simt::mma_a_fragment af[MW];
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        const simt::mma_accumulator& lo = pfrag[mw * KT + 2 * kk];
        const simt::mma_accumulator& hi = pfrag[mw * KT + 2 * kk + 1];
        af[mw] = {{simt::mma_pack(from_float<T>(lo.x[0]), from_float<T>(lo.x[1])),
                   simt::mma_pack(from_float<T>(lo.x[2]), from_float<T>(lo.x[3])),
                   simt::mma_pack(from_float<T>(hi.x[0]), from_float<T>(hi.x[1])),
                   simt::mma_pack(from_float<T>(hi.x[2]), from_float<T>(hi.x[3]))}};
      }
      DCPP_UNROLL
      for (int dp = 0; dp < DT / 2; ++dp) {
        auto fb = ctx.template ldmatrix<4, true>(b_row + kk * 16 * ldb + dp * 16);
        if constexpr (Finite) {
          DCPP_UNROLL
          for (int i = 0; i < 4; ++i)
            fb.x[i] = attention_finite_pair<T>(fb.x[i], *nonfinite);
        }
        attention_mma_slices<MW, T>(ctx, af, fb, acc + 2 * dp, DT);
      }
    }
  }
}

//! Two adjacent fp32 values to global memory in one 8-byte store (`dst` 8-byte aligned), or
//! added to what is there; on the device through PTX's vector load/store (no type punning).
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_store2(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
#else
  dst[0] = a, dst[1] = b;
#endif
}
//! dst = dst * w + (a, b) for two adjacent fp32 values (8-byte aligned).
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_blend2(float* dst, float w, float a, float b) {
#if defined(__CUDA_ARCH__)
  float x, y;
  asm volatile("ld.global.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "l"(dst) : "memory");
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x * w + a), "f"(y * w + b)
               : "memory");
#else
  dst[0] = dst[0] * w + a, dst[1] = dst[1] * w + b;
#endif
}
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_add2(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__)
  float x, y;
  asm volatile("ld.global.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "l"(dst) : "memory");
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x + a), "f"(y + b) : "memory");
#else
  dst[0] += a, dst[1] += b;
#endif
}

} // namespace detail

} // namespace dcpp::kernels
