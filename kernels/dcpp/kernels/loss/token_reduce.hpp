// Loss-token reduction, the kernel bodies (device-safe, SIMT layer): per (sequence, loss head)
// the masked sum of per-token losses and the count of loss tokens over a packed THD buffer, and
// the rank's per-head totals. Wrapped for CUDA in token_reduce.cuh and run on the CPU by
// dcpp/loss/token_mean.hpp through the host launcher.
#pragma once

#include <cstdint>

#include "dcpp/core/config.hpp"
#include "dcpp/core/float16.hpp"
#include "dcpp/core/simt.hpp"

namespace dcpp::kernels {

//! Inputs and outputs of the reduction. `Loss` is float, half or bfloat16; `Acc` (float or
//! double) accumulates. Token t of head h: `losses[h * loss_head_stride + t]`, counted when
//! `mask[h * mask_head_stride + t] != 0` (`mask_head_stride = 0`: one mask for every head).
//! Sequence s spans tokens `[cu_seqlens[s], cu_seqlens[s+1])` of the buffer (padding segments
//! included; their mask is 0).
template <class Loss, class Acc>
struct token_reduce_params {
  const Loss* losses = nullptr;
  std::int64_t loss_head_stride = 0;
  const std::uint8_t* mask = nullptr;
  std::int64_t mask_head_stride = 0;
  const std::int32_t* cu_seqlens = nullptr;
  int sequences = 0;
  int heads = 1;
  Acc* sums = nullptr;            //!< [sequences, heads]
  std::int64_t* counts = nullptr; //!< [sequences, heads]
  Acc* totals = nullptr;          //!< [2 * heads]: sums of every head, then counts of every head
};

//! Threads per block of both kernels (a multiple of 32; 256 keeps 8 warps in flight per block).
inline constexpr unsigned token_reduce_threads = 256;

//! Dynamic shared memory of either kernel: a 32-entry scratch for Acc and one for int64.
template <class Acc>
constexpr std::size_t token_reduce_shared_bytes() {
  return 32 * sizeof(Acc) + 32 * sizeof(std::int64_t) + 16;
}

//! Grid: one block per (sequence, head) = (blockIdx.x, blockIdx.y). Threads stride over the
//! sequence's tokens, then one block-wide sum of the values and of the counts.
template <class Ctx, class Loss, class Acc>
DCPP_HOST_DEVICE void token_reduce_body(Ctx& ctx, const token_reduce_params<Loss, Acc>& p) {
  const int s = static_cast<int>(ctx.block_index().x);
  const int h = static_cast<int>(ctx.block_index().y);
  Acc* value_scratch = ctx.template shared_array<Acc>(32);
  std::int64_t* count_scratch = ctx.template shared_array<std::int64_t>(32);
  const std::int64_t begin = p.cu_seqlens[s], end = p.cu_seqlens[s + 1];
  const Loss* losses = p.losses + h * p.loss_head_stride;
  const std::uint8_t* mask = p.mask + h * p.mask_head_stride;
  Acc sum = 0;
  std::int64_t count = 0;
  for (std::int64_t t = begin + simt::thread_rank(ctx); t < end;
       t += static_cast<std::int64_t>(ctx.block_dim().volume()))
    if (mask[t] != 0) {
      sum += static_cast<Acc>(to_float(losses[t]));
      ++count;
    }
  sum = simt::block_sum(ctx, sum, value_scratch);
  count = simt::block_sum(ctx, count, count_scratch);
  if (simt::thread_rank(ctx) == 0) {
    p.sums[static_cast<std::int64_t>(s) * p.heads + h] = sum;
    p.counts[static_cast<std::int64_t>(s) * p.heads + h] = count;
  }
}

//! Grid: one block per head. Sums the per-sequence results into `totals` (sums, then counts as
//! Acc: exact in double up to 2^53 tokens).
template <class Ctx, class Loss, class Acc>
DCPP_HOST_DEVICE void token_totals_body(Ctx& ctx, const token_reduce_params<Loss, Acc>& p) {
  const int h = static_cast<int>(ctx.block_index().x);
  Acc* value_scratch = ctx.template shared_array<Acc>(32);
  std::int64_t* count_scratch = ctx.template shared_array<std::int64_t>(32);
  Acc sum = 0;
  std::int64_t count = 0;
  for (int s = static_cast<int>(simt::thread_rank(ctx)); s < p.sequences;
       s += static_cast<int>(ctx.block_dim().volume())) {
    sum += p.sums[static_cast<std::int64_t>(s) * p.heads + h];
    count += p.counts[static_cast<std::int64_t>(s) * p.heads + h];
  }
  sum = simt::block_sum(ctx, sum, value_scratch);
  count = simt::block_sum(ctx, count, count_scratch);
  if (simt::thread_rank(ctx) == 0) {
    p.totals[h] = sum;
    p.totals[p.heads + h] = static_cast<Acc>(count);
  }
}

} // namespace dcpp::kernels
