// The CUDA launches of the library policy's element-wise kernels (library_ops.hpp), compiled once
// by nvcc into Meson's `dcpp_cuda_kernels` (declarations: library_ops_launch.hpp).
#include <cuda_runtime.h>

#include "dcpp/kernels/attention/library_ops_launch.hpp"
#include "dcpp/kernels/simt/cuda_context.cuh"

namespace dcpp::kernels {

namespace {

unsigned element_blocks(std::int64_t n) {
  return static_cast<unsigned>((n + 255) / 256);
}

template <class T>
__global__ void __launch_bounds__(256) widen_kernel(const T* in, float* out, std::int64_t n) {
  simt::cuda_context ctx;
  attention_widen_body(ctx, in, out, n);
}

template <class T>
__global__ void __launch_bounds__(256) add_widened_kernel(float* acc, const T* in, std::int64_t n) {
  simt::cuda_context ctx;
  attention_add_widened_body(ctx, acc, in, n);
}

__global__ void __launch_bounds__(256) fill_kernel(float* out, float value, std::int64_t n) {
  simt::cuda_context ctx;
  attention_fill_body(ctx, out, value, n);
}

} // namespace

template <class T>
cudaError_t attention_widen(const T* in, float* out, std::int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  widen_kernel<T><<<element_blocks(n), 256, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

template <class T>
cudaError_t attention_add_widened(float* acc, const T* in, std::int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  add_widened_kernel<T><<<element_blocks(n), 256, 0, stream>>>(acc, in, n);
  return cudaGetLastError();
}

cudaError_t attention_fill(float* out, float value, std::int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  fill_kernel<<<element_blocks(n), 256, 0, stream>>>(out, value, n);
  return cudaGetLastError();
}

template cudaError_t attention_widen<half>(const half*, float*, std::int64_t, cudaStream_t);
template cudaError_t attention_widen<bfloat16>(const bfloat16*, float*, std::int64_t, cudaStream_t);
template cudaError_t attention_widen<float>(const float*, float*, std::int64_t, cudaStream_t);
template cudaError_t attention_add_widened<half>(float*, const half*, std::int64_t, cudaStream_t);
template cudaError_t attention_add_widened<bfloat16>(float*, const bfloat16*, std::int64_t,
                                                     cudaStream_t);
template cudaError_t attention_add_widened<float>(float*, const float*, std::int64_t, cudaStream_t);

} // namespace dcpp::kernels
