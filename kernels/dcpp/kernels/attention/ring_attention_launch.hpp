// Declarations of the CUDA launches of THD ring attention (defined in ring_attention.cuh), so
// that C++ translation units (the device ring in dcpp/attention/ring_cuda.hpp) can call them
// without nvcc. Link one translation unit compiled by nvcc that instantiates them:
// kernels/dcpp/kernels/attention/ring_attention_instances.cu (every head shape and input type).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dcpp/kernels/attention/ring_attention.hpp"

namespace dcpp::kernels {

//! Forward step: partial O and LSE of `p.tiles` (query tiles of attention_tile::rows rows).
template <int DQK, int DV, class T>
cudaError_t attention_forward(const attention_params<T>& p, cudaStream_t stream);
//! Backward step: dQ over `q_tiles` (query tiles), dK/dV over `p.tiles` (key tiles).
template <int DQK, int DV, class T>
cudaError_t attention_backward(const attention_params<T>& p, attention_tiles q_tiles,
                               cudaStream_t stream);
//! Merge of a step's partial result into the running one over the rows of `p.tiles` (D: the
//! O / V head dim).
template <int D>
cudaError_t attention_merge(const attention_merge_params<D>& p, cudaStream_t stream);
//! Backward pre-pass rowsum(dO * O) into p.dsum (D: the O / V head dim).
template <int D, class T>
cudaError_t attention_dsum(const attention_params<T>& p, cudaStream_t stream);
//! dst += src, element-wise (fp32): a block's dK/dV from the previous rank onto this step's part.
cudaError_t attention_accumulate(float* dst, const float* src, std::int64_t n, cudaStream_t stream);
//! fp32 -> T, element-wise.
template <class T>
cudaError_t attention_convert(const float* in, T* out, std::int64_t n, cudaStream_t stream);
//! Rows of the full buffer into the rank's layout (`fill` on padding) and back.
template <class T>
cudaError_t partition_gather(const T* full, const std::int64_t* map, T* local, std::int64_t rows,
                             int width, T fill, cudaStream_t stream);
template <class T>
cudaError_t partition_scatter(const T* local, const std::int64_t* map, T* full, std::int64_t rows,
                              int width, cudaStream_t stream);

} // namespace dcpp::kernels
