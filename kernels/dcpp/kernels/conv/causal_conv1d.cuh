// Causal depthwise conv1d on CUDA: thin __global__ wrappers around causal_conv1d.hpp and the
// stream-ordered launches (backward with two-phase workspace).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dcpp/kernels/conv/causal_conv1d.hpp"
#include "dcpp/kernels/conv/causal_conv1d_launch.hpp"
#include "dcpp/kernels/simt/cuda_context.cuh"

namespace dcpp::kernels {

template <int W, int Vec, class T>
__global__ void __launch_bounds__(128) conv1d_forward_kernel(conv1d_params<T> p) {
  simt::cuda_context ctx;
  conv1d_forward_body<W, Vec>(ctx, p);
}

// minBlocksPerSM = 1 lets ptxas use the ~100 registers the fp16 W=4 Vec=4 instance needs; with
// the default heuristics it spilled 8 bytes on sm_80 (check_ptxas.py report). 100 registers x 128
// threads still fits 5 blocks per SM.
template <int W, int Vec, class T>
__global__ void __launch_bounds__(128, 1) conv1d_backward_kernel(conv1d_params<T> p) {
  simt::cuda_context ctx;
  conv1d_backward_body<W, Vec>(ctx, p);
}

template <int W, class T>
__global__ void __launch_bounds__(256)
    conv1d_reduce_kernel(conv1d_params<T> p, std::int64_t token_blocks) {
  simt::cuda_context ctx;
  conv1d_reduce_body<W>(ctx, p, token_blocks);
}

template <int W, int Vec, class T>
__global__ void __launch_bounds__(128) conv1d_halo_grad_kernel(conv1d_params<T> p) {
  simt::cuda_context ctx;
  conv1d_halo_grad_body<W, Vec>(ctx, p);
}

//! Channels per thread: 16-byte vectors (4 fp32 or 8 fp16/bf16 channels) when every buffer is
//! aligned and channels divide, else 1.
template <class T>
int conv1d_vector_width(const conv1d_params<T>& p) {
  constexpr int vec = conv1d_vector<T>;
  const auto aligned = [](const void* q) {
    return q == nullptr || reinterpret_cast<std::uintptr_t>(q) % (vec * sizeof(T)) == 0;
  };
  return p.channels % vec == 0 && aligned(p.x) && aligned(p.y) && aligned(p.dy) && aligned(p.dx) &&
                 aligned(p.halo_x)
             ? vec
             : 1;
}

inline dim3 conv1d_grid(std::int64_t tokens, int channels, int vec) {
  return dim3(static_cast<unsigned>((tokens + conv1d_tile::tokens_per_block - 1) /
                                    conv1d_tile::tokens_per_block),
              static_cast<unsigned>((channels / vec + conv1d_tile::channel_threads - 1) /
                                    conv1d_tile::channel_threads));
}

template <int W, class T>
cudaError_t conv1d_forward(const conv1d_params<T>& p, cudaStream_t stream) {
  if (p.tokens <= 0)
    return cudaSuccess;
  const dim3 block(conv1d_tile::channel_threads, conv1d_tile::token_groups);
  constexpr int V = conv1d_vector<T>;
  if (conv1d_vector_width(p) == V)
    conv1d_forward_kernel<W, V><<<conv1d_grid(p.tokens, p.channels, V), block, 0, stream>>>(p);
  else
    conv1d_forward_kernel<W, 1><<<conv1d_grid(p.tokens, p.channels, 1), block, 0, stream>>>(p);
  return cudaGetLastError();
}

//! Backward; `p.partial` must hold `conv1d_backward_workspace_bytes` bytes (two-phase: ask,
//! allocate, run). With CP, set `p.incoming_*` to the halo gradients received from the ranks
//! holding the next chunks (`conv1d_halo_gradients` there, then the exchange) first.
template <int W, class T>
cudaError_t conv1d_backward(const conv1d_params<T>& p, cudaStream_t stream) {
  if (p.tokens <= 0)
    return cudaSuccess;
  const dim3 block(conv1d_tile::channel_threads, conv1d_tile::token_groups);
  const int vec = conv1d_vector_width(p);
  const dim3 grid = conv1d_grid(p.tokens, p.channels, vec);
  constexpr int V = conv1d_vector<T>;
  if (vec == V)
    conv1d_backward_kernel<W, V><<<grid, block, conv1d_backward_shared_bytes<W, V>(), stream>>>(p);
  else
    conv1d_backward_kernel<W, 1><<<grid, block, conv1d_backward_shared_bytes<W, 1>(), stream>>>(p);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return e;
  const std::int64_t outputs = static_cast<std::int64_t>(p.channels) * (W + 1);
  conv1d_reduce_kernel<W><<<static_cast<unsigned>((outputs + 255) / 256), 256, 0, stream>>>(
      p, static_cast<std::int64_t>(grid.x));
  return cudaGetLastError();
}

//! Gradients of the halo rows (`p.halo_dx`), to send to their owners before the backward.
template <int W, class T>
cudaError_t conv1d_halo_gradients(const conv1d_params<T>& p, cudaStream_t stream) {
  if (p.seg.count <= 0 || p.seg.halo == nullptr)
    return cudaSuccess;
  const int vec = conv1d_vector_width(p);
  const dim3 grid(static_cast<unsigned>(p.seg.count),
                  static_cast<unsigned>((p.channels / vec + 127) / 128));
  constexpr int V = conv1d_vector<T>;
  if (vec == V)
    conv1d_halo_grad_kernel<W, V><<<grid, 128, 0, stream>>>(p);
  else
    conv1d_halo_grad_kernel<W, 1><<<grid, 128, 0, stream>>>(p);
  return cudaGetLastError();
}

} // namespace dcpp::kernels
