// The CUDA launch of the loss-token reduction for fp32 losses (fp64 and fp32 accumulation),
// compiled once by nvcc into Meson's `dcpp_cuda_kernels` (declaration: token_reduce_launch.hpp).
#include "dcpp/kernels/loss/token_reduce.cuh"

namespace dcpp::kernels {

template cudaError_t token_reduce<float, double>(const token_reduce_params<float, double>&,
                                                 cudaStream_t);
template cudaError_t token_reduce<float, float>(const token_reduce_params<float, float>&,
                                                cudaStream_t);

} // namespace dcpp::kernels
