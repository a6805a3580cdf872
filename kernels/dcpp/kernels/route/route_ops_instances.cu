// cuda_route_ops (dcpp/route/cuda_route_ops.hpp): the device router's operations, Thrust's
// algorithms of route_ops.hpp under the CUDA policy on the caller's stream.
#include <thrust/system/cuda/execution_policy.h>

#include "dcpp/route/cuda_route_ops.hpp"
#include "dcpp/route/route_ops.hpp"

namespace dcpp {
namespace {
auto on(cudaStream_t stream) {
  using policy = decltype(thrust::cuda::par_nosync.on(stream));
  return thrust_route_ops<policy>{thrust::cuda::par_nosync.on(stream)};
}
} // namespace

void cuda_route_ops::pack(std::size_t bytes, const route_ops_maps& m, const void* values,
                          std::byte* buffer) {
  on(stream).pack(bytes, m, values, buffer);
}
void cuda_route_ops::unpack(std::size_t bytes, const route_ops_maps& m, const std::byte* buffer,
                            void* values) {
  on(stream).unpack(bytes, m, buffer, values);
}
void cuda_route_ops::copy(std::size_t bytes, std::int64_t n, const std::int64_t* from,
                          const std::int64_t* to, const void* source, void* dest) {
  on(stream).copy(bytes, n, from, to, source, dest);
}
void cuda_route_ops::copy_rows(std::size_t bytes, std::int64_t rows, std::int64_t width,
                               const std::int64_t* from_row, const std::int64_t* to_row,
                               const void* source, void* dest) {
  on(stream).copy_rows(bytes, rows, width, from_row, to_row, source, dest);
}
void cuda_route_ops::add_rows(std::int64_t rows, std::int64_t width, const std::int64_t* from_row,
                              const std::int64_t* to_row, const float* source, float* dest) {
  on(stream).add_rows(rows, width, from_row, to_row, source, dest);
}
void cuda_route_ops::add_rows(std::int64_t rows, std::int64_t width, const std::int64_t* from_row,
                              const std::int64_t* to_row, const double* source, double* dest) {
  on(stream).add_rows(rows, width, from_row, to_row, source, dest);
}
void cuda_route_ops::fill(std::size_t bytes, std::int64_t n, const void* value, void* dest) {
  on(stream).fill(bytes, n, value, dest);
}
void cuda_route_ops::geometry(std::int64_t tokens, const std::int32_t* cu_padded,
                              const std::int32_t* cu, std::int32_t samples, std::int32_t cp,
                              std::int32_t rank, std::int64_t* positions, std::uint8_t* real) {
  on(stream).geometry(tokens, cu_padded, cu, samples, cp, rank, positions, real);
}
} // namespace dcpp
