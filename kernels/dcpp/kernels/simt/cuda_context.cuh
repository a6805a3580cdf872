// The CUDA side of dcpp's SIMT layer: hardware indices, barriers, warp shuffles, dynamic shared
// memory, the warp matrix instruction, cp.async and ldmatrix for kernel bodies written against
// dcpp/core/simt.hpp (sm_80 and newer).
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
  //! cp.async.cg of 16 bytes (L2 only: the tiles are reread from shared memory, not L1).
  __device__ void cp_async_16(void* dst, const void* src, bool valid) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
  }
  __device__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  template <int N>
  __device__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
  }
  template <int M, bool Trans>
  __device__ ldmatrix_fragment<M> ldmatrix(const void* row) {
    static_assert(M == 1 || M == 2 || M == 4, "ldmatrix loads 1, 2 or 4 matrices");
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
    ldmatrix_fragment<M> f;
    if constexpr (M == 4 && Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])
                   : "r"(address));
    else if constexpr (M == 4)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])
                   : "r"(address));
    else if constexpr (M == 2 && Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                   : "=r"(f.x[0]), "=r"(f.x[1])
                   : "r"(address));
    else if constexpr (M == 2)
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                   : "=r"(f.x[0]), "=r"(f.x[1])
                   : "r"(address));
    else if constexpr (Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                   : "=r"(f.x[0])
                   : "r"(address));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                   : "=r"(f.x[0])
                   : "r"(address));
    return f;
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
