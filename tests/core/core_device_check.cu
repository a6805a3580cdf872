// Compile-only check that include/dcpp/core is device-safe: nvcc builds this for sm_80 and sm_90.
#include "dcpp/core/math.hpp"

//! Per-rank tokens of each sample on a group of `cp` ranks, as a kernel would compute them.
__global__ void tokens_per_rank_kernel(const long long* lengths, int cp, long long* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    DCPP_EXPECTS(cp >= 1);
    out[i] = dcpp::padded_length(lengths[i], cp) / cp;
  }
}

static_assert(dcpp::ceil_div(10, 4) == 3);
static_assert(dcpp::next_power_of_two(24) == 32);
