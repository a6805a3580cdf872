// Declaration of the CUDA launch of the loss-token reduction (defined in token_reduce.cuh) for
// C++ translation units; instantiated in Meson's `dcpp_cuda_kernels`
// (kernels/dcpp/kernels/loss/token_reduce_instances.cu: fp32 losses, fp64 or fp32 accumulation).
#pragma once

#include <cuda_runtime_api.h>

#include "dcpp/kernels/loss/token_reduce.hpp"

namespace dcpp::kernels {

//! Enqueues the per-(sequence, head) sums and counts, then the totals, on `stream`.
template <class Loss, class Acc>
cudaError_t token_reduce(const token_reduce_params<Loss, Acc>& p, cudaStream_t stream);

} // namespace dcpp::kernels
