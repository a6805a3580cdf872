// The CUDA launches of THD ring attention, instantiated for head dims 64 and 128 and every input
// type (fp32, fp16, bf16): compile this file with nvcc into any program that uses the device ring
// (dcpp/attention/ring_cuda.hpp); Meson builds it as `dcpp_cuda_kernels`.
#include "dcpp/attention/ring_attention.cuh"

namespace dcpp::kernels {

// Ring attention: head dims 64 and 128, every input type.
#define DCPP_ATTENTION_INSTANTIATE(D, T)                                                           \
  template cudaError_t attention_forward<D, T>(const attention_params<T>&, cudaStream_t);          \
  template cudaError_t attention_backward<D, T>(const attention_params<T>&, attention_tiles,       \
                                                cudaStream_t);                                     \
  template cudaError_t attention_dsum<D, T>(const attention_params<T>&, cudaStream_t);
DCPP_ATTENTION_INSTANTIATE(64, float)
DCPP_ATTENTION_INSTANTIATE(128, float)
DCPP_ATTENTION_INSTANTIATE(64, half)
DCPP_ATTENTION_INSTANTIATE(128, half)
DCPP_ATTENTION_INSTANTIATE(64, bfloat16)
DCPP_ATTENTION_INSTANTIATE(128, bfloat16)
#undef DCPP_ATTENTION_INSTANTIATE
template cudaError_t attention_merge<64>(const attention_merge_params<64>&, cudaStream_t);
template cudaError_t attention_merge<128>(const attention_merge_params<128>&, cudaStream_t);
template cudaError_t attention_convert<float>(const float*, float*, std::int64_t, cudaStream_t);
template cudaError_t attention_convert<half>(const float*, half*, std::int64_t, cudaStream_t);
template cudaError_t attention_convert<bfloat16>(const float*, bfloat16*, std::int64_t,
                                                 cudaStream_t);
template cudaError_t partition_gather<float>(const float*, const std::int64_t*, float*,
                                             std::int64_t, int, float, cudaStream_t);
template cudaError_t partition_gather<half>(const half*, const std::int64_t*, half*, std::int64_t,
                                            int, half, cudaStream_t);
template cudaError_t partition_gather<bfloat16>(const bfloat16*, const std::int64_t*, bfloat16*,
                                                std::int64_t, int, bfloat16, cudaStream_t);
template cudaError_t partition_scatter<float>(const float*, const std::int64_t*, float*,
                                              std::int64_t, int, cudaStream_t);
template cudaError_t partition_scatter<half>(const half*, const std::int64_t*, half*, std::int64_t,
                                             int, cudaStream_t);
template cudaError_t partition_scatter<bfloat16>(const bfloat16*, const std::int64_t*, bfloat16*,
                                                 std::int64_t, int, cudaStream_t);

} // namespace dcpp::kernels
