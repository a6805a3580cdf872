// dcpp's SIMT layer, the part every kernel body sees (device-safe): index types and the
// collective helpers written once against any execution context. A context is either
// `simt::cuda_context` (kernels/dcpp/kernels/simt/cuda_context.cuh, real hardware) or
// `simt::host_context` (include/dcpp/simt/host_launcher.hpp, the CPU launcher of the tests).
//
// A context provides, for the calling thread:
//   thread_index(), block_index(), block_dim(), grid_dim()  -> index3
//   sync_block()                 barrier of all threads of the block (__syncthreads)
//   sync_warp()                  barrier of the 32 lanes of the warp (__syncwarp, full mask)
//   shuffle(v, src_lane)         value of `v` in lane `src_lane` (__shfl_sync, full mask)
//   shuffle_xor(v, lane_mask)    value of `v` in lane `lane ^ lane_mask` (__shfl_xor_sync)
//   shuffle_down(v, delta)       value of `v` in lane `lane + delta`, own value past the warp
//   shared_array<T>(n)           the next n elements of the block's dynamic shared memory; every
//                                thread gets the same pointer when all call it in the same order
//   mma_m16n8k16<T>(a, b, c)     D = A B + C on the warp's tensor cores (T: half or bfloat16,
//                                fp32 accumulate), fragments laid out as below
//   cp_async_16(dst, src, valid) asynchronous copy of 16 bytes from global `src` to shared `dst`
//                                (both 16-byte aligned); zeros instead when `valid` is false
//                                (cp.async.cg with src-size 0: `src` is not read)
//   cp_async_commit()            closes the calling thread's group of copies issued so far
//   cp_async_wait<N>()           waits until at most the N newest committed groups of the calling
//                                thread are pending; other threads' copies need a barrier after
//   ldmatrix<M, Trans>(row)      ldmatrix.sync.aligned.m8n8.x{M}{.trans}.shared.b16: lanes
//                                8i..8i+7 give the 16-byte rows of matrix i (M = 1, 2, 4); lane l
//                                gets, per matrix, the two elements of row l/4, columns 2(l%4)
//                                and +1 (Trans: column l/4, rows 2(l%4) and +1), low half first
// Shuffles need all 32 lanes of the warp (blocks are multiples of 32 threads where they are used).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dcpp/core/config.hpp"
#include "dcpp/core/float16.hpp"

namespace dcpp::simt {

inline constexpr int warp_size = 32;
inline constexpr unsigned full_mask = 0xffffffffu;

//! Grid, block and thread coordinates (like CUDA's dim3 / uint3).
struct index3 {
  unsigned x = 1, y = 1, z = 1;
  DCPP_HOST_DEVICE constexpr std::size_t volume() const noexcept {
    return static_cast<std::size_t>(x) * y * z;
  }
};

//! Fragments of the warp matrix instruction `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}`
//! (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"): A is 16x16 row-major,
//! B 16x8 (k x n), C and D 16x8 fp32. Lane l has group g = l / 4 and index t = l % 4 in it.
//! A: 4 registers of two 16-bit values (low half first), elements e = 0..7 below;
//! B: 2 registers, elements e = 0..3; C/D: 4 floats.
struct mma_a_fragment {
  std::uint32_t x[4];
};
struct mma_b_fragment {
  std::uint32_t x[2];
};
struct mma_accumulator {
  float x[4];
};
struct mma_coord {
  int row, col;
};
//! What ldmatrix returns: one register per 8x8 matrix.
template <int M>
struct ldmatrix_fragment {
  std::uint32_t x[M];
};

//! (row, k) of element e (0..7) of lane's A fragment: rows g and g+8, columns 2t, 2t+1 and +8.
DCPP_HOST_DEVICE constexpr mma_coord mma_a_coord(unsigned lane, int e) noexcept {
  const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3u);
  return {g + ((e >> 1) & 1) * 8, t * 2 + (e & 1) + (e >> 2) * 8};
}
//! (k, n) of element e (0..3) of lane's B fragment: rows 2t, 2t+1 and +8, column g.
DCPP_HOST_DEVICE constexpr mma_coord mma_b_coord(unsigned lane, int e) noexcept {
  const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3u);
  return {t * 2 + (e & 1) + (e >> 1) * 8, g};
}
//! (row, n) of element e (0..3) of lane's C/D fragment: rows g and g+8, columns 2t, 2t+1.
DCPP_HOST_DEVICE constexpr mma_coord mma_c_coord(unsigned lane, int e) noexcept {
  const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3u);
  return {g + (e >> 1) * 8, t * 2 + (e & 1)};
}
//! Two 16-bit values in one register, `low` first (element 2i in the low half).
template <class T>
DCPP_HOST_DEVICE constexpr std::uint32_t mma_pack(T low, T high) noexcept {
  return static_cast<std::uint32_t>(low.bits) | (static_cast<std::uint32_t>(high.bits) << 16);
}

//! Linear index of the calling thread inside its block (x fastest).
template <class Ctx>
DCPP_HOST_DEVICE unsigned thread_rank(const Ctx& ctx) noexcept {
  const index3 t = ctx.thread_index(), d = ctx.block_dim();
  return t.x + d.x * (t.y + d.y * t.z);
}

template <class Ctx>
DCPP_HOST_DEVICE unsigned lane_of(const Ctx& ctx) noexcept {
  return thread_rank(ctx) % warp_size;
}

template <class Ctx>
DCPP_HOST_DEVICE unsigned warp_of(const Ctx& ctx) noexcept {
  return thread_rank(ctx) / warp_size;
}

//! Butterfly sum over the 32 lanes; every lane gets the total.
template <class Ctx, class T>
DCPP_HOST_DEVICE T warp_sum(Ctx& ctx, T value) {
  for (int offset = warp_size / 2; offset > 0; offset /= 2)
    value += ctx.shuffle_xor(value, offset);
  return value;
}

//! Butterfly maximum over the 32 lanes; every lane gets it.
template <class Ctx, class T>
DCPP_HOST_DEVICE T warp_max(Ctx& ctx, T value) {
  for (int offset = warp_size / 2; offset > 0; offset /= 2) {
    const T other = ctx.shuffle_xor(value, offset);
    value = other > value ? other : value;
  }
  return value;
}

//! Sum over the whole block (block size a multiple of 32, at most 1024); every thread gets the
//! total. `scratch` is block-shared storage for at least 32 values. Ends with a barrier, so
//! `scratch` may be reused right after.
template <class Ctx, class T>
DCPP_HOST_DEVICE T block_sum(Ctx& ctx, T value, T* scratch) {
  const unsigned lane = lane_of(ctx), warp = warp_of(ctx);
  const unsigned warps = static_cast<unsigned>(ctx.block_dim().volume() / warp_size);
  value = warp_sum(ctx, value);
  if (lane == 0)
    scratch[warp] = value;
  ctx.sync_block();
  T total = lane < warps ? scratch[lane] : T{};
  total = warp_sum(ctx, total);
  ctx.sync_block();
  return total;
}

} // namespace dcpp::simt
