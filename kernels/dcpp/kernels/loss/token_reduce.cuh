// Loss-token reduction on CUDA: thin __global__ wrappers around the bodies of token_reduce.hpp
// and the stream-ordered launch.
#pragma once

#include <cuda_runtime.h>

#include "dcpp/kernels/loss/token_reduce.hpp"
#include "dcpp/kernels/loss/token_reduce_launch.hpp"
#include "dcpp/kernels/simt/cuda_context.cuh"

namespace dcpp::kernels {

template <class Loss, class Acc>
__global__ void __launch_bounds__(token_reduce_threads)
    token_reduce_kernel(token_reduce_params<Loss, Acc> p) {
  simt::cuda_context ctx;
  token_reduce_body(ctx, p);
}

template <class Loss, class Acc>
__global__ void __launch_bounds__(token_reduce_threads)
    token_totals_kernel(token_reduce_params<Loss, Acc> p) {
  simt::cuda_context ctx;
  token_totals_body(ctx, p);
}

//! Enqueues both kernels on `stream`: per-(sequence, head) sums and counts, then the totals.
//! Does not synchronise; returns the launch status.
template <class Loss, class Acc>
cudaError_t token_reduce(const token_reduce_params<Loss, Acc>& p, cudaStream_t stream) {
  if (p.heads < 1 || p.heads > 65535 || p.sequences < 0)
    return cudaErrorInvalidValue;
  const std::size_t shared = token_reduce_shared_bytes<Acc>();
  if (p.sequences > 0) {
    token_reduce_kernel<Loss, Acc>
        <<<dim3(static_cast<unsigned>(p.sequences), static_cast<unsigned>(p.heads)),
           token_reduce_threads, shared, stream>>>(p);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  token_totals_kernel<Loss, Acc>
      <<<dim3(static_cast<unsigned>(p.heads)), token_reduce_threads, shared, stream>>>(p);
  return cudaGetLastError();
}

} // namespace dcpp::kernels
