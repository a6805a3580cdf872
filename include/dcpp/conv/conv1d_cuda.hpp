// The CP halo exchange of the causal conv1d on device memory: the routes of
// `conv1d_halo_routes` (dcpp/conv/conv1d.hpp, the same maps the host exchange runs) with a row
// gather kernel to pack and unpack, one all_to_all_v of a device-memory communicator (NCCL) and
// the row gather-sum for the incoming gradients. Kernels run on the caller's compute stream;
// the transfer runs on the communicator's stream, ordered by events (the host only waits where
// NCCL's all_to_all_v checks its counts). Plain C++; link Meson's `dcpp_cuda_kernels`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/conv/conv1d.hpp"
#include "dcpp/cuda/memory.hpp"
#include "dcpp/kernels/attention/ring_attention_launch.hpp" // kernels::partition_gather (a row gather)
#include "dcpp/kernels/conv/causal_conv1d_launch.hpp"

namespace dcpp {

//! One rank's halo exchanges for one micro-batch of one CP group, on the device.
template <class C, class T>
class cuda_conv1d_halo {
public:
  cuda_conv1d_halo(C group, const conv1d_halo_plan& plan, int channels, cudaStream_t stream)
      : group_(std::move(group)), routes_(conv1d_halo_routes::make(plan)), channels_(channels),
        stream_(stream) {
    static_assert(C::buffer_memory == memory_space::device,
                  "cuda_conv1d_halo moves device buffers; use a device-memory communicator");
    detail::check_routes_group("cuda_conv1d_halo", routes_, group_.rank(), group_.size());
    const auto& r = routes_;
    send_rows_ = detail::device_array<std::int64_t>(r.send_rows);
    halo_sources_ = detail::device_array<std::int64_t>(r.halo_sources);
    grad_send_rows_ = detail::device_array<std::int64_t>(r.grad_send_rows);
    incoming_rows_ = detail::device_array<std::int64_t>(r.incoming_rows);
    incoming_offsets_ = detail::device_array<std::int64_t>(r.incoming_offsets);
    incoming_sources_ = detail::device_array<std::int64_t>(r.incoming_sources);
  }

  [[nodiscard]] std::int64_t halo_rows() const noexcept { return routes_.halo_rows; }

  //! Forward (collective over the group): `halo` [halo_rows, channels] from this rank's `x`
  //! [tokens, channels]; rows before a sequence's start are zero. Device pointers.
  void exchange(const T* x, T* halo) {
    const auto& r = routes_;
    const std::size_t w = static_cast<std::size_t>(channels_);
    if (send_.size() < r.send_rows.size() * w)
      send_ = detail::device_array<T>(r.send_rows.size() * w);
    if (received_.size() < static_cast<std::size_t>(r.received_rows()) * w)
      received_ = detail::device_array<T>(static_cast<std::size_t>(r.received_rows()) * w);
    detail::cuda_check(kernels::partition_gather<T>(x, send_rows_.data(), send_.data(),
                                                    static_cast<std::int64_t>(r.send_rows.size()),
                                                    channels_, from_float<T>(0.0f), stream_),
                       "conv1d halo: pack");
    transfer(send_.data(), r.send_counts, received_.data(), r.recv_counts);
    detail::cuda_check(kernels::partition_gather<T>(received_.data(), halo_sources_.data(), halo,
                                                    r.halo_rows, channels_, from_float<T>(0.0f),
                                                    stream_),
                       "conv1d halo: unpack");
  }

  //! Backward (collective over the group): sends `halo_dx` [halo_rows, channels] (fp32, from
  //! kernels::conv1d_halo_gradients) to the tokens' owners, sums what arrives per row (own rows
  //! first, then senders in rank order) and points `p.incoming_*` at the result for
  //! kernels::conv1d_backward. The result lives in this object until the next call.
  void collect(const float* halo_dx, kernels::conv1d_params<T>& p) {
    const auto& r = routes_;
    const std::size_t w = static_cast<std::size_t>(channels_);
    if (grad_send_.size() < r.grad_send_rows.size() * w)
      grad_send_ = detail::device_array<float>(r.grad_send_rows.size() * w);
    const auto received_rows = static_cast<std::size_t>(r.received_gradient_rows());
    if (grad_received_.size() < received_rows * w)
      grad_received_ = detail::device_array<float>(received_rows * w);
    if (incoming_.size() < r.incoming_rows.size() * w)
      incoming_ = detail::device_array<float>(r.incoming_rows.size() * w);
    detail::cuda_check(
        kernels::partition_gather<float>(halo_dx, grad_send_rows_.data(), grad_send_.data(),
                                         static_cast<std::int64_t>(r.grad_send_rows.size()),
                                         channels_, 0.0f, stream_),
        "conv1d halo gradients: pack");
    transfer(grad_send_.data(), r.grad_send_counts, grad_received_.data(), r.grad_recv_counts);
    detail::cuda_check(kernels::row_gather_sum(grad_received_.data(), incoming_offsets_.data(),
                                               incoming_sources_.data(), incoming_.data(),
                                               static_cast<std::int64_t>(r.incoming_rows.size()),
                                               channels_, false, stream_),
                       "conv1d halo gradients: sum");
    p.incoming_rows = incoming_rows_.data();
    p.incoming = incoming_.data();
    p.incoming_count = static_cast<std::int64_t>(r.incoming_rows.size());
  }

private:
  template <class E>
  void transfer(const E* send, const std::vector<std::int64_t>& send_rows, E* recv,
                const std::vector<std::int64_t>& recv_rows) {
    const auto send_counts = conv1d_halo_routes::elements(send_rows, channels_);
    const auto recv_counts = conv1d_halo_routes::elements(recv_rows, channels_);
    std::int64_t sent = 0, received = 0;
    for (std::size_t q = 0; q < send_counts.size(); ++q)
      sent += send_counts[q], received += recv_counts[q];
    order_(stream_, group_.stream()); // the pack is done before the transfer reads it
    group_.all_to_all_v(std::span<const E>(send, static_cast<std::size_t>(sent)),
                        std::span<const std::int64_t>(send_counts),
                        std::span<E>(recv, static_cast<std::size_t>(received)),
                        std::span<const std::int64_t>(recv_counts));
    order_(group_.stream(), stream_); // the unpack waits for the transfer
  }

  C group_;
  conv1d_halo_routes routes_;
  int channels_;
  cudaStream_t stream_;
  detail::stream_order order_;
  detail::device_array<std::int64_t> send_rows_, halo_sources_, grad_send_rows_, incoming_rows_,
      incoming_offsets_, incoming_sources_;
  detail::device_array<T> send_, received_;
  detail::device_array<float> grad_send_, grad_received_, incoming_;
};

} // namespace dcpp
