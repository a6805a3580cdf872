// The CUDA launches of the causal conv1d (widths 2-4; fp32, fp16, bf16) and of the row
// gather-sum, compiled once by nvcc into Meson's `dcpp_cuda_kernels` for C++ callers
// (declarations: causal_conv1d_launch.hpp).
#include "dcpp/kernels/conv/causal_conv1d.cuh"

namespace dcpp::kernels {

#define DCPP_CONV1D_INSTANTIATE(W, T)                                                              \
  template cudaError_t conv1d_forward<W, T>(const conv1d_params<T>&, cudaStream_t);                \
  template cudaError_t conv1d_backward<W, T>(const conv1d_params<T>&, cudaStream_t);               \
  template cudaError_t conv1d_halo_gradients<W, T>(const conv1d_params<T>&, cudaStream_t);
DCPP_CONV1D_INSTANTIATE(2, float)
DCPP_CONV1D_INSTANTIATE(3, float)
DCPP_CONV1D_INSTANTIATE(4, float)
DCPP_CONV1D_INSTANTIATE(2, half)
DCPP_CONV1D_INSTANTIATE(3, half)
DCPP_CONV1D_INSTANTIATE(4, half)
DCPP_CONV1D_INSTANTIATE(2, bfloat16)
DCPP_CONV1D_INSTANTIATE(3, bfloat16)
DCPP_CONV1D_INSTANTIATE(4, bfloat16)
#undef DCPP_CONV1D_INSTANTIATE

namespace {
__global__ void __launch_bounds__(256)
    row_gather_sum_kernel(const float* in, const std::int64_t* offsets, const std::int64_t* sources,
                          float* out, std::int64_t segments, int width, bool accumulate) {
  simt::cuda_context ctx;
  row_gather_sum_body(ctx, in, offsets, sources, out, segments, width, accumulate);
}
} // namespace

cudaError_t row_gather_sum(const float* in, const std::int64_t* offsets,
                           const std::int64_t* sources, float* out, std::int64_t segments,
                           int width, bool accumulate, cudaStream_t stream) {
  const std::int64_t n = segments * width;
  if (n <= 0)
    return cudaSuccess;
  row_gather_sum_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      in, offsets, sources, out, segments, width, accumulate);
  return cudaGetLastError();
}

} // namespace dcpp::kernels
