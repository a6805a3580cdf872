// THD ring attention, the element-wise kernels around the ring: accumulating dK/dV, converting
// fp32 results to the element type, and the partition gather/scatter of token rows.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "dcpp/core/float16.hpp"

namespace dcpp::kernels {

//! dst[i] += src[i] (fp32): a block's dK/dV arriving from the previous rank added to this step's
//! contribution, one thread per element.
template <class Ctx>
DCPP_HOST_DEVICE void attention_accumulate_body(Ctx& ctx, float* dst, const float* src,
                                                std::int64_t n) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i < n)
    dst[i] += src[i];
}

//! Element-wise fp32 -> T (final O, dQ, dK, dV), one thread per element.
template <class T, class Ctx>
DCPP_HOST_DEVICE void attention_convert_body(Ctx& ctx, const float* in, T* out, std::int64_t n) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i < n)
    out[i] = from_float<T>(in[i]);
}

//! Partition gather: local[row] = full[map[row]] (`width` elements per row), or `fill` where
//! map[row] < 0 (padding). One thread per element.
template <class T, class Ctx>
DCPP_HOST_DEVICE void partition_gather_body(Ctx& ctx, const T* full, const std::int64_t* map,
                                            T* local, std::int64_t rows, int width, T fill) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i >= rows * width)
    return;
  const std::int64_t src = map[i / width];
  local[i] = src >= 0 ? full[src * width + i % width] : fill;
}

//! Partition scatter: full[map[row]] = local[row] for real rows (map >= 0).
template <class T, class Ctx>
DCPP_HOST_DEVICE void partition_scatter_body(Ctx& ctx, const T* local, const std::int64_t* map,
                                             T* full, std::int64_t rows, int width) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i >= rows * width)
    return;
  const std::int64_t dst = map[i / width];
  if (dst >= 0)
    full[dst * width + i % width] = local[i];
}

} // namespace dcpp::kernels
