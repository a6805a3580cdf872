// The GPU trainer's layer launches (defined in layers.cu, compiled by nvcc), callable from C++.
// Each enqueues on `stream` and returns the launch status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dcpp/cuda/memory_resource.hpp"
#include "layers.hpp"

namespace trainer {

cudaError_t gemm(const kernels::gemm_params& p, cudaStream_t stream);
cudaError_t embed(const float* table, const std::int32_t* ids, float* x, std::int64_t tokens,
                  int vocab, int dim, cudaStream_t stream);
cudaError_t add(const float* a, const float* b, float* y, std::int64_t n, cudaStream_t stream);
cudaError_t relu(const float* u, float* h, std::int64_t n, cudaStream_t stream);
cudaError_t relu_grad(const float* u, float* dh, std::int64_t n, cudaStream_t stream);
cudaError_t cross_entropy(const float* logits, const std::int32_t* labels, const std::uint8_t* mask,
                          float scale, float* loss, float* dlogits, std::int64_t tokens, int vocab,
                          cudaStream_t stream);
cudaError_t sgd(float* w, const float* g, float* v, std::int64_t n, float lr, float momentum,
                cudaStream_t stream);
//! The head-parallel layer's recurrence (layers.hpp): forward, backward, and the gate gradient
//! (one holder of each head only).
cudaError_t scan_forward(const kernels::scan_params& p, cudaStream_t stream);
cudaError_t scan_backward(const kernels::scan_params& p, cudaStream_t stream);
cudaError_t scan_gate_grad(const kernels::scan_params& p, float* dgate, cudaStream_t stream);
//! embedding_csr.hpp on the device (Thrust's CUDA policy on `stream`, its scratch space from
//! `pool`, which serves that stream only; `keys`: room for `tokens` ids).
cudaError_t embedding_csr(const std::int32_t* ids, const std::uint8_t* real, std::int64_t tokens,
                          int vocab, std::int64_t* offsets, std::int64_t* sources,
                          std::int32_t* keys, dcpp::device_caching_allocator& pool,
                          cudaStream_t stream);

} // namespace trainer
