// Device memory as a caching allocator's upstream (core/caching_allocator.hpp): cudaMalloc and
// cudaFree on the current device. Free of fmt and of communicators, so that nvcc-compiled
// sources (launch files that hand the pool to Thrust's CUDA policy) can include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <new>
#include <string>

#include "dcpp/core/caching_allocator.hpp"
#include "dcpp/error.hpp"

namespace dcpp {

//! cudaMalloc / cudaFree. Out of memory is std::bad_alloc (the caching allocator then gives its
//! cache back and retries once); any other CUDA error is a dcpp::error naming it.
struct cuda_device_memory {
  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError(); // clear the sticky error of the failed allocation
      throw std::bad_alloc();
    }
    if (rc != cudaSuccess)
      throw error(status_code::communication_error,
                  std::string("cudaMalloc (caching allocator) failed: ") + cudaGetErrorString(rc));
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept { cudaFree(p); }
};

//! Scratch space for Thrust's CUDA algorithms (and the CUB primitives they call) on one stream:
//! `thrust::cuda::par_nosync(pool).on(stream)`.
using device_caching_allocator = caching_allocator<cuda_device_memory>;

} // namespace dcpp
