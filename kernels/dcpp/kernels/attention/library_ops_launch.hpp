// Declarations of the CUDA launches of library_ops.hpp, for C++ translation units (the cuDNN
// policy); instantiated in Meson's `dcpp_cuda_kernels` (library_ops_instances.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dcpp/kernels/attention/library_ops.hpp"

namespace dcpp::kernels {

//! out = in as fp32, element-wise, on `stream`.
template <class T>
cudaError_t attention_widen(const T* in, float* out, std::int64_t n, cudaStream_t stream);
//! acc += in as fp32, element-wise.
template <class T>
cudaError_t attention_add_widened(float* acc, const T* in, std::int64_t n, cudaStream_t stream);
//! out = value, element-wise.
cudaError_t attention_fill(float* out, float value, std::int64_t n, cudaStream_t stream);

} // namespace dcpp::kernels
