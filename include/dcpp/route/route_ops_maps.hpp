// What the device router hands its operations backend for one transfer direction (host- and
// device-safe: plain pointers into the backend's memory).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dcpp {

//! The index maps of one transfer direction, in the backend's memory: per token, where it comes
//! from or goes to in the field array (`index`), its peer and its place among that peer's
//! tokens; per peer, the byte offset of the field's block in the all-to-all buffer.
struct route_ops_maps {
  std::int64_t tokens = 0;
  const std::int64_t* index = nullptr;
  const std::int32_t* peer = nullptr;
  const std::int64_t* slot = nullptr;
  const std::int64_t* offset = nullptr;
};

//! Whether an operations backend moves values of `bytes` bytes: it moves them as words of 1, 2,
//! 4, 8 or 16 bytes.
[[nodiscard]] constexpr bool route_movable(std::size_t bytes) noexcept {
  return bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16;
}

} // namespace dcpp
