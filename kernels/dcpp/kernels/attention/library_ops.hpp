// The element-wise kernels a library attention policy (dcpp/attention/cudnn_attention.hpp) runs
// around the library's calls: its outputs come in the input type, the ring's partial results and
// accumulators are fp32. One thread per element.
#pragma once

#include <cstdint>

#include "dcpp/core/config.hpp"
#include "dcpp/core/float16.hpp"

namespace dcpp::kernels {

//! out[i] = in[i] as fp32.
template <class T, class Ctx>
DCPP_HOST_DEVICE void attention_widen_body(Ctx& ctx, const T* in, float* out, std::int64_t n) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i < n)
    out[i] = to_float(in[i]);
}

//! acc[i] += in[i] as fp32.
template <class T, class Ctx>
DCPP_HOST_DEVICE void attention_add_widened_body(Ctx& ctx, float* acc, const T* in,
                                                 std::int64_t n) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i < n)
    acc[i] += to_float(in[i]);
}

//! out[i] = value (an LSE buffer set to -inf: no key seen yet).
template <class Ctx>
DCPP_HOST_DEVICE void attention_fill_body(Ctx& ctx, float* out, float value, std::int64_t n) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i < n)
    out[i] = value;
}

} // namespace dcpp::kernels
