// Small owning helpers for device memory and stream ordering used by dcpp's device-side C++
// (the device ring, the device halo exchange, the GPU trainer). Plain C++ against the CUDA
// runtime API; errors become dcpp::error naming the call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"

namespace dcpp::detail {

inline std::string where(const std::source_location& at) {
  return fmt::format("{}:{}", at.file_name(), at.line());
}

//! Throws dcpp::error naming the call, CUDA's message and code, and the caller's place.
inline void cuda_check(cudaError_t rc, const char* call,
                       std::source_location at = std::source_location::current()) {
  if (rc != cudaSuccess)
    throw error(status_code::communication_error,
                fmt::format("{} failed: {} ({}) at {}", call, cudaGetErrorString(rc),
                            static_cast<int>(rc), where(at)));
}

//! A device array (cudaMalloc / cudaFree); size 0 holds no allocation.
template <class T>
class device_array {
public:
  device_array() = default;
  explicit device_array(std::size_t n) : n_(n) {
    if (n > 0)
      cuda_check(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)), "cudaMalloc");
  }
  explicit device_array(const std::vector<T>& host) : device_array(host.size()) {
    if (n_ > 0)
      cuda_check(cudaMemcpy(data_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice),
                 "cudaMemcpy (upload)");
  }
  device_array(device_array&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  device_array& operator=(device_array&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    return *this;
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() {
    if (data_ != nullptr)
      cudaFree(data_);
  }
  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }

private:
  T* data_ = nullptr;
  std::size_t n_ = 0;
};

//! An event that orders one stream after another without blocking the host.
class stream_order {
public:
  stream_order() {
    cuda_check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
  }
  stream_order(const stream_order&) = delete;
  stream_order& operator=(const stream_order&) = delete;
  ~stream_order() { cudaEventDestroy(event_); }
  //! Work enqueued on `after` from now on starts once everything enqueued on `before` is done.
  void operator()(cudaStream_t before, cudaStream_t after) {
    if (before == after)
      return;
    cuda_check(cudaEventRecord(event_, before), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(after, event_, 0), "cudaStreamWaitEvent");
  }

private:
  cudaEvent_t event_ = nullptr;
};

} // namespace dcpp::detail
