// Every kernel instantiation dcpp ships, compiled by nvcc for sm_80 and sm_90; the ptxas
// resource report of this file is checked by check_ptxas.py (no spills, no local memory).
#include "dcpp/core/float16.hpp"
#include "dcpp/loss/token_reduce.cuh"

namespace dcpp::kernels {

// Loss-token reduction: every loss element type, both accumulators.
template cudaError_t token_reduce<float, float>(const token_reduce_params<float, float>&,
                                                cudaStream_t);
template cudaError_t token_reduce<float, double>(const token_reduce_params<float, double>&,
                                                 cudaStream_t);
template cudaError_t token_reduce<half, float>(const token_reduce_params<half, float>&,
                                               cudaStream_t);
template cudaError_t token_reduce<half, double>(const token_reduce_params<half, double>&,
                                                cudaStream_t);
template cudaError_t token_reduce<bfloat16, float>(const token_reduce_params<bfloat16, float>&,
                                                   cudaStream_t);
template cudaError_t token_reduce<bfloat16, double>(const token_reduce_params<bfloat16, double>&,
                                                    cudaStream_t);

} // namespace dcpp::kernels
