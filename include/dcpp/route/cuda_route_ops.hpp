// The device router's operations on a GPU: Thrust's CUDA policy (`par_nosync`) on a stream, for
// device memory. Declared here for host code; defined in
// kernels/dcpp/kernels/route/route_ops_instances.cu (the `dcpp_cuda_kernels` library, or
// CMake's dcpp::kernels), which nvcc compiles.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "dcpp/route/route_ops_maps.hpp"

namespace dcpp {

//! `thrust_route_ops` (route_ops.hpp) under `thrust::cuda::par_nosync.on(stream)`; every call is
//! enqueued on `stream` and returns without waiting. Pass the stream the communicator's
//! collectives run on (`nccl_communicator::stream()`).
struct cuda_route_ops {
  cudaStream_t stream = nullptr;

  void pack(std::size_t bytes, const route_ops_maps& m, const void* values, std::byte* buffer);
  void unpack(std::size_t bytes, const route_ops_maps& m, const std::byte* buffer, void* values);
  void copy(std::size_t bytes, std::int64_t n, const std::int64_t* from, const std::int64_t* to,
            const void* source, void* dest);
  void copy_rows(std::size_t bytes, std::int64_t rows, std::int64_t width,
                 const std::int64_t* from_row, const std::int64_t* to_row, const void* source,
                 void* dest);
  //! `thrust_route_ops::add_rows` for the element types a gradient has here.
  void add_rows(std::int64_t rows, std::int64_t width, const std::int64_t* from_row,
                const std::int64_t* to_row, const float* source, float* dest);
  void add_rows(std::int64_t rows, std::int64_t width, const std::int64_t* from_row,
                const std::int64_t* to_row, const double* source, double* dest);
  void fill(std::size_t bytes, std::int64_t n, const void* value, void* dest);
  void geometry(std::int64_t tokens, const std::int32_t* cu_padded, const std::int32_t* cu,
                std::int32_t samples, std::int32_t cp, std::int32_t rank, std::int64_t* positions,
                std::uint8_t* real);
  [[nodiscard]] static constexpr bool movable(std::size_t bytes) noexcept {
    return route_movable(bytes);
  }
};

} // namespace dcpp
