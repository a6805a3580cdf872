// CUDA launches of the GPU trainer's layers (bodies in layers.hpp).
#include <thrust/system/cuda/execution_policy.h>

#include "dcpp/kernels/simt/cuda_context.cuh"
#include "embedding_csr.hpp"
#include "layers_launch.hpp"

namespace trainer {
namespace {

constexpr unsigned threads = 256;

unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

__global__ void __launch_bounds__(256) gemm_kernel(kernels::gemm_params p) {
  dcpp::simt::cuda_context ctx;
  kernels::gemm_body(ctx, p);
}
__global__ void __launch_bounds__(256)
    embed_kernel(const float* table, const std::int32_t* ids, float* x, std::int64_t tokens,
                 int vocab, int dim) {
  dcpp::simt::cuda_context ctx;
  kernels::embed_body(ctx, table, ids, x, tokens, vocab, dim);
}
__global__ void __launch_bounds__(256)
    add_kernel(const float* a, const float* b, float* y, std::int64_t n) {
  dcpp::simt::cuda_context ctx;
  kernels::add_body(ctx, a, b, y, n);
}
__global__ void __launch_bounds__(256) relu_kernel(const float* u, float* h, std::int64_t n) {
  dcpp::simt::cuda_context ctx;
  kernels::relu_body(ctx, u, h, n);
}
__global__ void __launch_bounds__(256) relu_grad_kernel(const float* u, float* dh, std::int64_t n) {
  dcpp::simt::cuda_context ctx;
  kernels::relu_grad_body(ctx, u, dh, n);
}
__global__ void __launch_bounds__(256)
    cross_entropy_kernel(const float* logits, const std::int32_t* labels, const std::uint8_t* mask,
                         float scale, float* loss, float* dlogits, std::int64_t tokens, int vocab) {
  dcpp::simt::cuda_context ctx;
  kernels::cross_entropy_body(ctx, logits, labels, mask, scale, loss, dlogits, tokens, vocab);
}
__global__ void __launch_bounds__(256)
    sgd_kernel(float* w, const float* g, float* v, std::int64_t n, float lr, float momentum) {
  dcpp::simt::cuda_context ctx;
  kernels::sgd_body(ctx, w, g, v, n, lr, momentum);
}

__global__ void __launch_bounds__(256) scan_forward_kernel(kernels::scan_params p) {
  dcpp::simt::cuda_context ctx;
  kernels::scan_forward_body(ctx, p);
}
__global__ void __launch_bounds__(256) scan_backward_kernel(kernels::scan_params p) {
  dcpp::simt::cuda_context ctx;
  kernels::scan_backward_body(ctx, p);
}
__global__ void __launch_bounds__(256) scan_gate_grad_kernel(kernels::scan_params p, float* dgate) {
  dcpp::simt::cuda_context ctx;
  kernels::scan_gate_grad_body(ctx, p.dgate_partial, dgate, p.sequences, p.heads_here, p.first_head,
                               p.head_dim);
}

std::int64_t scan_threads(const kernels::scan_params& p) {
  return std::int64_t{p.sequences} * p.heads_here * p.head_dim;
}

} // namespace

cudaError_t scan_forward(const kernels::scan_params& p, cudaStream_t stream) {
  if (scan_threads(p) <= 0)
    return cudaSuccess;
  scan_forward_kernel<<<blocks_for(scan_threads(p)), threads, 0, stream>>>(p);
  return cudaGetLastError();
}
cudaError_t scan_backward(const kernels::scan_params& p, cudaStream_t stream) {
  if (scan_threads(p) <= 0)
    return cudaSuccess;
  scan_backward_kernel<<<blocks_for(scan_threads(p)), threads, 0, stream>>>(p);
  return cudaGetLastError();
}
cudaError_t scan_gate_grad(const kernels::scan_params& p, float* dgate, cudaStream_t stream) {
  if (p.heads_here <= 0)
    return cudaSuccess;
  scan_gate_grad_kernel<<<blocks_for(p.heads_here), threads, 0, stream>>>(p, dgate);
  return cudaGetLastError();
}
cudaError_t gemm(const kernels::gemm_params& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0)
    return cudaSuccess;
  const dim3 block(kernels::gemm_tile, kernels::gemm_tile);
  const dim3 grid(static_cast<unsigned>((p.n + kernels::gemm_tile - 1) / kernels::gemm_tile),
                  static_cast<unsigned>((p.m + kernels::gemm_tile - 1) / kernels::gemm_tile));
  gemm_kernel<<<grid, block, kernels::gemm_shared_bytes, stream>>>(p);
  return cudaGetLastError();
}
cudaError_t embed(const float* table, const std::int32_t* ids, float* x, std::int64_t tokens,
                  int vocab, int dim, cudaStream_t stream) {
  if (tokens * dim <= 0)
    return cudaSuccess;
  embed_kernel<<<blocks_for(tokens * dim), threads, 0, stream>>>(table, ids, x, tokens, vocab, dim);
  return cudaGetLastError();
}
cudaError_t add(const float* a, const float* b, float* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  add_kernel<<<blocks_for(n), threads, 0, stream>>>(a, b, y, n);
  return cudaGetLastError();
}
cudaError_t relu(const float* u, float* h, std::int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  relu_kernel<<<blocks_for(n), threads, 0, stream>>>(u, h, n);
  return cudaGetLastError();
}
cudaError_t relu_grad(const float* u, float* dh, std::int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  relu_grad_kernel<<<blocks_for(n), threads, 0, stream>>>(u, dh, n);
  return cudaGetLastError();
}
cudaError_t cross_entropy(const float* logits, const std::int32_t* labels, const std::uint8_t* mask,
                          float scale, float* loss, float* dlogits, std::int64_t tokens, int vocab,
                          cudaStream_t stream) {
  if (tokens <= 0)
    return cudaSuccess;
  cross_entropy_kernel<<<blocks_for(tokens), threads, 0, stream>>>(logits, labels, mask, scale,
                                                                   loss, dlogits, tokens, vocab);
  return cudaGetLastError();
}
cudaError_t sgd(float* w, const float* g, float* v, std::int64_t n, float lr, float momentum,
                cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  sgd_kernel<<<blocks_for(n), threads, 0, stream>>>(w, g, v, n, lr, momentum);
  return cudaGetLastError();
}

cudaError_t embedding_csr(const std::int32_t* ids, const std::uint8_t* real, std::int64_t tokens,
                          int vocab, std::int64_t* offsets, std::int64_t* sources,
                          std::int32_t* keys, dcpp::device_caching_allocator& pool,
                          cudaStream_t stream) {
  if (tokens > 0) // copy_if, the radix sort and the search take their scratch from the pool
    embedding_csr(thrust::cuda::par_nosync(pool).on(stream), ids, real, tokens, vocab, offsets,
                  sources, keys);
  else
    cudaMemsetAsync(offsets, 0, (static_cast<std::size_t>(vocab) + 1) * sizeof(std::int64_t),
                    stream);
  return cudaGetLastError();
}

} // namespace trainer
