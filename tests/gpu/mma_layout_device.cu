// The device half of the MMA layout check (test_mma_layout.cpp): one warp's m16n8k16 tensor-core
// product through the SIMT layer's cuda_context, as the attention kernels issue it.
#include <cuda_runtime.h>

#include "dcpp/core/float16.hpp"
#include "dcpp/kernels/simt/cuda_context.cuh"

namespace {

template <class T>
__global__ void mma_layout_kernel(const dcpp::simt::mma_a_fragment* a,
                                  const dcpp::simt::mma_b_fragment* b,
                                  dcpp::simt::mma_accumulator* d) {
  dcpp::simt::cuda_context ctx;
  d[threadIdx.x] = ctx.mma_m16n8k16<T>(a[threadIdx.x], b[threadIdx.x], d[threadIdx.x]);
}

} // namespace

//! d[lane] = A B + d[lane] for one warp's fragments (device pointers, 32 entries each); bf16
//! inputs where `bf16`, else fp16. Synchronous.
cudaError_t dcpp_test_mma_on_device(bool bf16, const dcpp::simt::mma_a_fragment* a,
                                    const dcpp::simt::mma_b_fragment* b,
                                    dcpp::simt::mma_accumulator* d) {
  if (bf16)
    mma_layout_kernel<dcpp::bfloat16><<<1, 32>>>(a, b, d);
  else
    mma_layout_kernel<dcpp::half><<<1, 32>>>(a, b, d);
  const cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}
