// A ring step as calls of a plain ragged attention (SDPA over THD segments, with or without a
// top-left causal mask): what a library kernel that knows nothing of zigzag chunks and padding
// gaps (cuDNN's SDPA, FlashAttention's varlen) runs for one step of dcpp's ring.
//
// A local sequence holds two zigzag chunks, each a prefix of real rows followed by padding. A
// library call sees contiguous real rows only, so a step becomes segments (entries) of real
// query rows against real key rows:
//   diagonal  first half x first half (causal), second x second (causal): one call;
//             second half x first half (no mask): a second call
//   lower     first half x first half, and second half x first half (no mask): two calls
//   upper     second half x first half, and second half x second half (no mask): two calls
// Within a call no two entries share a query row or a key row, so a call's O/LSE and its
// dQ/dK/dV can be written in place; the calls of a step are merged through the LSE (forward)
// and added (backward). Entries are exactly the visible (query, key) pairs of the step
// (kernels::attention_row_sees_key and the masks of block_info.hpp), each once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "dcpp/attention/partition.hpp"

namespace dcpp {

//! Real query rows [q_begin, q_begin + q_rows) against real key rows [k_begin, k_begin + k_rows)
//! of the rank's buffer (local rows), one local sequence.
struct sdpa_entry {
  std::int32_t q_begin = 0, q_rows = 0;
  std::int32_t k_begin = 0, k_rows = 0;
  friend bool operator==(const sdpa_entry&, const sdpa_entry&) = default;
};

//! One library call: its entries (a ragged batch), masked top-left causal or not.
struct sdpa_call {
  bool causal = false;
  std::vector<sdpa_entry> entries;
  [[nodiscard]] std::int32_t longest_q() const {
    std::int32_t m = 0;
    for (const sdpa_entry& e : entries)
      m = std::max(m, e.q_rows);
    return m;
  }
  [[nodiscard]] std::int32_t longest_k() const {
    std::int32_t m = 0;
    for (const sdpa_entry& e : entries)
      m = std::max(m, e.k_rows);
    return m;
  }
};

//! The calls of a ring step of `kind` on `part`, with the KV owner's real rows `kv_real`
//! ([2 * sequences]: each half's, `part.real_of(owner)`). Calls without entries are left out.
[[nodiscard]] inline std::vector<sdpa_call> sdpa_calls(const ring_partition& part,
                                                       kernels::ring_step_kind kind,
                                                       std::span<const std::int32_t> kv_real) {
  using kernels::ring_step_kind;
  const auto& offset = part.offsets();
  const auto& q_real = part.own_real();
  std::vector<sdpa_call> calls(2);
  calls[0].causal = kind == ring_step_kind::diagonal;
  const auto add = [](sdpa_call& c, std::int32_t q0, std::int32_t qn, std::int32_t k0,
                      std::int32_t kn) {
    if (qn > 0 && kn > 0)
      c.entries.push_back({q0, qn, k0, kn});
  };
  for (int s = 0; s < part.sequences(); ++s) {
    const std::int32_t base = offset[static_cast<std::size_t>(s)];
    const std::int32_t chunk = (offset[static_cast<std::size_t>(s) + 1] - base) / 2;
    const std::int32_t qr0 = q_real[2 * static_cast<std::size_t>(s)];
    const std::int32_t qr1 = q_real[2 * static_cast<std::size_t>(s) + 1];
    const std::int32_t kr0 = kv_real[2 * static_cast<std::size_t>(s)];
    const std::int32_t kr1 = kv_real[2 * static_cast<std::size_t>(s) + 1];
    switch (kind) {
    case ring_step_kind::diagonal:
      add(calls[0], base, qr0, base, kr0);
      add(calls[0], base + chunk, qr1, base + chunk, kr1);
      add(calls[1], base + chunk, qr1, base, kr0);
      break;
    case ring_step_kind::lower:
      add(calls[0], base, qr0, base, kr0);
      add(calls[1], base + chunk, qr1, base, kr0);
      break;
    case ring_step_kind::upper:
      add(calls[0], base + chunk, qr1, base, kr0);
      add(calls[1], base + chunk, qr1, base + chunk, kr1);
      break;
    }
  }
  std::erase_if(calls, [](const sdpa_call& c) { return c.entries.empty(); });
  return calls;
}

} // namespace dcpp
