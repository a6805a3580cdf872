// Every kernel instantiation dcpp ships, compiled by nvcc for sm_80 and sm_90; the ptxas
// resource report of this file is checked by check_ptxas.py (no spills, no local memory).
#include "dcpp/core/float16.hpp"
#include "dcpp/loss/token_reduce.cuh"

namespace dcpp::kernels {

// Loss-token reduction: every loss element type, both accumulators.
template cudaError_t token_reduce<float, float>(const token_reduce_params<float, float>&,
                                                cudaStream_t);
template cudaError_t token_reduce<float, double>(const token_reduce_params<float, double>&,
                                                 cudaStream_t);
template cudaError_t token_reduce<half, float>(const token_reduce_params<half, float>&,
                                               cudaStream_t);
template cudaError_t token_reduce<half, double>(const token_reduce_params<half, double>&,
                                                cudaStream_t);
template cudaError_t token_reduce<bfloat16, float>(const token_reduce_params<bfloat16, float>&,
                                                   cudaStream_t);
template cudaError_t token_reduce<bfloat16, double>(const token_reduce_params<bfloat16, double>&,
                                                    cudaStream_t);

} // namespace dcpp::kernels

#include "dcpp/conv/causal_conv1d.cuh"

namespace dcpp::kernels {

// Causal conv1d: widths 2..4, every element type (both vector widths through the dispatch).
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

} // namespace dcpp::kernels

#include "dcpp/simt/cuda_context.cuh"

namespace dcpp::kernels {

// The warp matrix instruction of the SIMT layer (for the attention kernels to come).
template <class T>
__global__ void mma_check_kernel(const simt::mma_a_fragment* a, const simt::mma_b_fragment* b,
                                 simt::mma_accumulator* d) {
  simt::cuda_context ctx;
  d[threadIdx.x] = ctx.mma_m16n8k16<T>(a[threadIdx.x], b[threadIdx.x], d[threadIdx.x]);
}
template __global__ void mma_check_kernel<half>(const simt::mma_a_fragment*,
                                                const simt::mma_b_fragment*,
                                                simt::mma_accumulator*);
template __global__ void mma_check_kernel<bfloat16>(const simt::mma_a_fragment*,
                                                    const simt::mma_b_fragment*,
                                                    simt::mma_accumulator*);

} // namespace dcpp::kernels

// Ring attention: every instantiation dcpp ships for the device ring.
#include "dcpp/attention/ring_attention_instances.cu"
