// Declarations of the CUDA launches of the causal conv1d (defined in causal_conv1d.cuh) and of
// the row gather-sum, so that C++ translation units can call them without nvcc. Link one
// translation unit compiled by nvcc that instantiates them: Meson's `dcpp_cuda_kernels`
// (kernels/dcpp/kernels/conv/causal_conv1d_instances.cu: widths 2-4, fp32/fp16/bf16).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dcpp/kernels/conv/causal_conv1d.hpp"

namespace dcpp::kernels {

//! Forward: y from x (and the halo rows), on `stream`.
template <int W, class T>
cudaError_t conv1d_forward(const conv1d_params<T>& p, cudaStream_t stream);
//! Backward: dx, dw, db; `p.partial` holds conv1d_backward_workspace_bytes bytes.
template <int W, class T>
cudaError_t conv1d_backward(const conv1d_params<T>& p, cudaStream_t stream);
//! Gradients of the halo rows (`p.halo_dx`), to send to their owners before the backward.
template <int W, class T>
cudaError_t conv1d_halo_gradients(const conv1d_params<T>& p, cudaStream_t stream);

//! out[s, :] (+)= sum of in[sources[t], :] for t in [offsets[s], offsets[s+1]) (see
//! row_gather_sum_body); offsets and sources in device memory.
cudaError_t row_gather_sum(const float* in, const std::int64_t* offsets,
                           const std::int64_t* sources, float* out, std::int64_t segments,
                           int width, bool accumulate, cudaStream_t stream);

} // namespace dcpp::kernels
