// Every kernel instantiation dcpp ships, compiled by nvcc for sm_80 and sm_90; the ptxas
// resource report of this file is checked by check_ptxas.py (no spills, no local memory).
#include "dcpp/core/float16.hpp"
#include "dcpp/kernels/loss/token_reduce.cuh"

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

// Causal conv1d: widths 2..4, every element type (both vector widths through the dispatch),
// and the row gather-sum: the instances dcpp_cuda_kernels ships.
#include "dcpp/kernels/conv/causal_conv1d_instances.cu"

#include "dcpp/kernels/simt/cuda_context.cuh"

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
#include "dcpp/kernels/attention/ring_attention_instances.cu"
