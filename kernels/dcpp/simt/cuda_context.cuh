// The CUDA side of dcpp's SIMT layer: hardware indices, barriers, warp shuffles and dynamic
// shared memory for kernel bodies written against dcpp/core/simt.hpp.
#pragma once

#include <cstddef>

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
