// THD ring attention on CUDA: thin __global__ wrappers around ring_attention.hpp and the
// stream-ordered launches of one ring step (forward, backward), the merge, the backward pre-pass
// and the conversions. The work lists (tiles) and the layout arrays must be device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dcpp/kernels/attention/ring_attention.hpp"
#include "dcpp/kernels/attention/ring_attention_launch.hpp"
#include "dcpp/kernels/simt/cuda_context.cuh"

namespace dcpp::kernels {

// minBlocksPerSM = 1 on the three attention kernels: the O (or dQ, dK, dV) accumulators take up to
// 128 registers per lane at head dim 256; a higher minimum would force spills there. The
// occupancy that results per shape is in `./dev.sh sass` and docs/kernels.md.
template <int DQK, int DV, class T>
__global__ void __launch_bounds__(128, 1) attention_forward_kernel(attention_params<T> p) {
  simt::cuda_context ctx;
  attention_forward_body<DQK, DV>(ctx, p);
}

template <int DQK, int DV, class T>
__global__ void __launch_bounds__(128, 1) attention_dq_kernel(attention_params<T> p) {
  simt::cuda_context ctx;
  attention_dq_body<DQK, DV>(ctx, p);
}

template <int DQK, int DV, class T, attention_dkv_part Part>
__global__ void __launch_bounds__(128, 1) attention_dkv_kernel(attention_params<T> p) {
  simt::cuda_context ctx;
  attention_dkv_body<DQK, DV, T, Part>(ctx, p);
}

template <int D>
__global__ void __launch_bounds__(128) attention_merge_kernel(attention_merge_params<D> p) {
  simt::cuda_context ctx;
  attention_merge_body<D>(ctx, p);
}

template <int D, class T>
__global__ void __launch_bounds__(256) attention_dsum_kernel(attention_params<T> p) {
  simt::cuda_context ctx;
  attention_dsum_body<D>(ctx, p);
}

__global__ void __launch_bounds__(256)
    attention_accumulate_kernel(float* dst, const float* src, std::int64_t n) {
  simt::cuda_context ctx;
  attention_accumulate_body(ctx, dst, src, n);
}

template <class T>
__global__ void __launch_bounds__(256)
    attention_convert_kernel(const float* in, T* out, std::int64_t n) {
  simt::cuda_context ctx;
  attention_convert_body(ctx, in, out, n);
}

template <class T>
__global__ void __launch_bounds__(256)
    partition_gather_kernel(const T* full, const std::int64_t* map, T* local, std::int64_t rows,
                            int width, T fill) {
  simt::cuda_context ctx;
  partition_gather_body(ctx, full, map, local, rows, width, fill);
}

template <class T>
__global__ void __launch_bounds__(256)
    partition_scatter_kernel(const T* local, const std::int64_t* map, T* full, std::int64_t rows,
                             int width) {
  simt::cuda_context ctx;
  partition_scatter_body(ctx, local, map, full, rows, width);
}

namespace detail {

template <class Kernel>
cudaError_t attention_allow_shared(Kernel kernel, std::size_t bytes) {
  if (bytes <= 48 * 1024)
    return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

inline unsigned attention_element_blocks(std::int64_t n) {
  return static_cast<unsigned>((n + 255) / 256);
}

} // namespace detail

//! Forward step: partial O and LSE of `p.tiles` (query tiles of attention_tile::rows rows).
template <int DQK, int DV, class T>
cudaError_t attention_forward(const attention_params<T>& p, cudaStream_t stream) {
  using cfg = attention_tile<DQK, DV, T>;
  if (p.tiles.count == 0 || p.heads == 0)
    return cudaSuccess;
  if (attention_overlap(p, DQK, DV, attention_pass::forward) != nullptr)
    return cudaErrorInvalidValue; // an output overlapping an input would race
  if (const cudaError_t e =
          detail::attention_allow_shared(attention_forward_kernel<DQK, DV, T>, cfg::forward_shared);
      e != cudaSuccess)
    return e;
  attention_forward_kernel<DQK, DV, T>
      <<<dim3(static_cast<unsigned>(p.tiles.count), static_cast<unsigned>(p.heads)), cfg::threads,
         cfg::forward_shared, stream>>>(p);
  return cudaGetLastError();
}

namespace detail {

template <int DQK, int DV, class T, attention_dkv_part Part>
cudaError_t attention_dkv(const attention_params<T>& p, cudaStream_t stream) {
  using cfg = attention_tile<DQK, DV, T>;
  if (const cudaError_t e =
          attention_allow_shared(attention_dkv_kernel<DQK, DV, T, Part>, cfg::dkv_shared);
      e != cudaSuccess)
    return e;
  attention_dkv_kernel<DQK, DV, T, Part>
      <<<dim3(static_cast<unsigned>(p.tiles.count), static_cast<unsigned>(p.kv_heads)),
         cfg::threads, cfg::dkv_shared, stream>>>(p);
  return cudaGetLastError();
}

} // namespace detail

//! Backward step: dQ over `q_tiles` (query tiles), dK/dV over `p.tiles` (key tiles).
template <int DQK, int DV, class T>
cudaError_t attention_backward(const attention_params<T>& p, attention_tiles q_tiles,
                               cudaStream_t stream) {
  using cfg = attention_tile<DQK, DV, T>;
  if (attention_overlap(p, DQK, DV, attention_pass::backward) != nullptr)
    return cudaErrorInvalidValue; // an output overlapping an input would race
  if (q_tiles.count > 0 && p.heads > 0) {
    if (const cudaError_t e =
            detail::attention_allow_shared(attention_dq_kernel<DQK, DV, T>, cfg::dq_shared);
        e != cudaSuccess)
      return e;
    attention_params<T> pq = p;
    pq.tiles = q_tiles;
    attention_dq_kernel<DQK, DV, T>
        <<<dim3(static_cast<unsigned>(q_tiles.count), static_cast<unsigned>(p.heads)), cfg::threads,
           cfg::dq_shared, stream>>>(pq);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  if (p.tiles.count == 0 || p.kv_heads == 0)
    return cudaSuccess;
  if constexpr (cfg::split_dkv) {
    if (const cudaError_t e = detail::attention_dkv<DQK, DV, T, attention_dkv_part::dv>(p, stream);
        e != cudaSuccess)
      return e;
    return detail::attention_dkv<DQK, DV, T, attention_dkv_part::dk>(p, stream);
  } else {
    return detail::attention_dkv<DQK, DV, T, attention_dkv_part::both>(p, stream);
  }
}

//! Merge of a step's partial result into the running one over the rows of `p.tiles`.
template <int D>
cudaError_t attention_merge(const attention_merge_params<D>& p, cudaStream_t stream) {
  if (p.tiles.count == 0 || p.heads == 0)
    return cudaSuccess;
  attention_merge_kernel<D>
      <<<dim3(static_cast<unsigned>(p.tiles.count), static_cast<unsigned>(p.heads)), 128, 0,
         stream>>>(p);
  return cudaGetLastError();
}

//! Backward pre-pass rowsum(dO * O) into p.dsum.
template <int D, class T>
cudaError_t attention_dsum(const attention_params<T>& p, cudaStream_t stream) {
  const std::int64_t n = p.tokens * p.heads;
  if (n == 0)
    return cudaSuccess;
  if (attention_overlap(p, D, D, attention_pass::dsum) != nullptr)
    return cudaErrorInvalidValue;
  attention_dsum_kernel<D, T><<<detail::attention_element_blocks(n), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

template <class T>
cudaError_t attention_convert(const float* in, T* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  attention_convert_kernel<T><<<detail::attention_element_blocks(n), 256, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

template <class T>
cudaError_t partition_gather(const T* full, const std::int64_t* map, T* local, std::int64_t rows,
                             int width, T fill, cudaStream_t stream) {
  if (rows * width == 0)
    return cudaSuccess;
  partition_gather_kernel<T><<<detail::attention_element_blocks(rows * width), 256, 0, stream>>>(
      full, map, local, rows, width, fill);
  return cudaGetLastError();
}

template <class T>
cudaError_t partition_scatter(const T* local, const std::int64_t* map, T* full, std::int64_t rows,
                              int width, cudaStream_t stream) {
  if (rows * width == 0)
    return cudaSuccess;
  partition_scatter_kernel<T><<<detail::attention_element_blocks(rows * width), 256, 0, stream>>>(
      local, map, full, rows, width);
  return cudaGetLastError();
}

} // namespace dcpp::kernels
