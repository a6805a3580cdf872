// The CUDA launches of THD ring attention, instantiated for every head shape dcpp's kernels take
// (64, 96, 128, 192, 256, and MLA's 192/128) and every input type (fp32, fp16, bf16): compile this
// file with nvcc into any program that uses the device ring (dcpp/attention/ring_cuda.hpp); Meson
// builds it as `dcpp_cuda_kernels`.
#include "dcpp/kernels/attention/ring_attention.cuh"

namespace dcpp::kernels {

// Ring attention: every head shape (Q/K, V) dcpp's kernels take, every input type.
#define DCPP_ATTENTION_INSTANTIATE(DQK, DV, T)                                                     \
  template cudaError_t attention_forward<DQK, DV, T>(const attention_params<T>&, cudaStream_t);    \
  template cudaError_t attention_backward<DQK, DV, T>(const attention_params<T>&, attention_tiles, \
                                                      cudaStream_t);
#define DCPP_ATTENTION_INSTANTIATE_SHAPE(DQK, DV)                                                  \
  DCPP_ATTENTION_INSTANTIATE(DQK, DV, float)                                                       \
  DCPP_ATTENTION_INSTANTIATE(DQK, DV, half)                                                        \
  DCPP_ATTENTION_INSTANTIATE(DQK, DV, bfloat16)
DCPP_ATTENTION_INSTANTIATE_SHAPE(64, 64)
DCPP_ATTENTION_INSTANTIATE_SHAPE(96, 96)
DCPP_ATTENTION_INSTANTIATE_SHAPE(128, 128)
DCPP_ATTENTION_INSTANTIATE_SHAPE(192, 128)
DCPP_ATTENTION_INSTANTIATE_SHAPE(192, 192)
DCPP_ATTENTION_INSTANTIATE_SHAPE(256, 256)
#undef DCPP_ATTENTION_INSTANTIATE_SHAPE
#undef DCPP_ATTENTION_INSTANTIATE
// The merge and the row sums depend on the O / V head dim only.
#define DCPP_ATTENTION_INSTANTIATE_VALUE(D)                                                        \
  template cudaError_t attention_merge<D>(const attention_merge_params<D>&, cudaStream_t);         \
  template cudaError_t attention_dsum<D, float>(const attention_params<float>&, cudaStream_t);     \
  template cudaError_t attention_dsum<D, half>(const attention_params<half>&, cudaStream_t);       \
  template cudaError_t attention_dsum<D, bfloat16>(const attention_params<bfloat16>&, cudaStream_t);
DCPP_ATTENTION_INSTANTIATE_VALUE(64)
DCPP_ATTENTION_INSTANTIATE_VALUE(96)
DCPP_ATTENTION_INSTANTIATE_VALUE(128)
DCPP_ATTENTION_INSTANTIATE_VALUE(192)
DCPP_ATTENTION_INSTANTIATE_VALUE(256)
#undef DCPP_ATTENTION_INSTANTIATE_VALUE
// Not a template: defined here, once, for programs linking the instances.
cudaError_t attention_accumulate(float* dst, const float* src, std::int64_t n,
                                 cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  attention_accumulate_kernel<<<detail::attention_element_blocks(n), 256, 0, stream>>>(dst, src, n);
  return cudaGetLastError();
}
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
