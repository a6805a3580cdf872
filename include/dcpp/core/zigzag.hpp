// Zigzag chunk geometry (DESIGN.md section 2), shared by the router and the kernels
// (device-safe): a sample padded to P tokens on a group of cp ranks is cut into 2*cp chunks of
// P/(2*cp); group rank r holds chunk r, then chunk 2*cp-1-r.
#pragma once

#include <cstdint>

#include "dcpp/core/config.hpp"

namespace dcpp {

//! Tokens per chunk of a sample padded to `padded_length` on `cp` ranks.
DCPP_HOST_DEVICE constexpr std::int64_t zigzag_chunk_size(std::int64_t padded_length,
                                                          std::int64_t cp) noexcept {
  return padded_length / (2 * cp);
}

//! Index (0 .. 2*cp-1) of the chunk that group rank `rank` holds as its `half` (0: first, 1:
//! second).
DCPP_HOST_DEVICE constexpr std::int64_t zigzag_chunk_index(std::int64_t cp, std::int64_t rank,
                                                           int half) noexcept {
  return half == 0 ? rank : 2 * cp - 1 - rank;
}

//! Position in the whole sample of local token `local` (0 .. 2*chunk-1) on group rank `rank`.
DCPP_HOST_DEVICE constexpr std::int64_t zigzag_position(std::int64_t padded_length, std::int64_t cp,
                                                        std::int64_t rank,
                                                        std::int64_t local) noexcept {
  const std::int64_t chunk = zigzag_chunk_size(padded_length, cp);
  const int half = local < chunk ? 0 : 1;
  return zigzag_chunk_index(cp, rank, half) * chunk + (local - half * chunk);
}

//! Real (unpadded) tokens of a sample of `length` tokens inside its chunk `index`.
DCPP_HOST_DEVICE constexpr std::int64_t zigzag_real_in_chunk(std::int64_t length,
                                                             std::int64_t padded_length,
                                                             std::int64_t cp,
                                                             std::int64_t index) noexcept {
  const std::int64_t chunk = zigzag_chunk_size(padded_length, cp);
  const std::int64_t left = length - index * chunk;
  return left <= 0 ? 0 : (left < chunk ? left : chunk);
}

} // namespace dcpp
