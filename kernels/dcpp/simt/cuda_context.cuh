// The CUDA side of dcpp's SIMT layer: hardware indices, barriers, warp shuffles and dynamic
// shared memory for kernel bodies written against dcpp/core/simt.hpp.
#pragma once

#include <cstddef>
#include <type_traits>

#include "dcpp/core/simt.hpp"

namespace dcpp::simt {

//! Dynamic shared memory of the running kernel (sized at launch).
__device__ inline unsigned char* dynamic_shared_memory() {
  extern __shared__ __align__(16) unsigned char dcpp_dynamic_shared[];
  return dcpp_dynamic_shared;
}

struct cuda_context {
  __device__ index3 thread_index() const { return {threadIdx.x, threadIdx.y, threadIdx.z}; }
  __device__ index3 block_index() const { return {blockIdx.x, blockIdx.y, blockIdx.z}; }
  __device__ index3 block_dim() const { return {blockDim.x, blockDim.y, blockDim.z}; }
  __device__ index3 grid_dim() const { return {gridDim.x, gridDim.y, gridDim.z}; }
  __device__ void sync_block() { __syncthreads(); }
  __device__ void sync_warp() { __syncwarp(full_mask); }
  template <class T>
  __device__ T shuffle(T value, int src_lane) {
    return __shfl_sync(full_mask, value, src_lane);
  }
  template <class T>
  __device__ T shuffle_xor(T value, int lane_mask) {
    return __shfl_xor_sync(full_mask, value, lane_mask);
  }
  template <class T>
  __device__ T shuffle_down(T value, unsigned delta) {
    return __shfl_down_sync(full_mask, value, delta);
  }
  //! One m16n8k16 tensor-core product, D = A B + C (sm_80 and newer).
  template <class T>
  __device__ mma_accumulator mma_m16n8k16(const mma_a_fragment& a, const mma_b_fragment& b,
                                          const mma_accumulator& c) {
    static_assert(std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, "half or bfloat16");
    mma_accumulator d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, half>)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                   "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                   : "=f"(d.x[0]), "=f"(d.x[1]), "=f"(d.x[2]), "=f"(d.x[3])
                   : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]),
                     "f"(c.x[0]), "f"(c.x[1]), "f"(c.x[2]), "f"(c.x[3]));
    else
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                   "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                   : "=f"(d.x[0]), "=f"(d.x[1]), "=f"(d.x[2]), "=f"(d.x[3])
                   : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]),
                     "f"(c.x[0]), "f"(c.x[1]), "f"(c.x[2]), "f"(c.x[3]));
#else
    __trap(); // the instruction needs sm_80
#endif
    return d;
  }
  template <class T>
  __device__ T* shared_array(std::size_t count) {
    offset_ = (offset_ + alignof(T) - 1) / alignof(T) * alignof(T);
    T* result = reinterpret_cast<T*>(dynamic_shared_memory() + offset_);
    offset_ += count * sizeof(T);
    return result;
  }

private:
  std::size_t offset_ = 0;
};

} // namespace dcpp::simt
