// THD ring attention, block info and mask: the facts of one local sequence a block loads, the
// block's rows from the work list, which keys a query row sees at each ring step kind, and the
// per-row statistics (LSE, D) the backward reads.
#pragma once

#include "dcpp/kernels/attention/softmax.hpp"

namespace dcpp::kernels {

namespace detail {

//! The facts of one local sequence a block needs, loaded once: where it starts, its length, the
//! zigzag chunk and the real rows of each half on this rank (q) and on the KV owner (kv). Real
//! rows are a prefix of each half, so the visible keys are [0, kr0) and [chunk, chunk + kr1).
struct attention_sequence {
  int base, len, chunk, qr0, qr1, kr0, kr1;
  DCPP_HOST_DEVICE DCPP_FORCE_INLINE bool key_real(int j) const {
    return j < chunk ? j < kr0 : j - chunk < kr1;
  }
  DCPP_HOST_DEVICE DCPP_FORCE_INLINE bool query_real(int i) const {
    return i < chunk ? i < qr0 : i - chunk < qr1;
  }
  //! One past the last real key / query row.
  DCPP_HOST_DEVICE DCPP_FORCE_INLINE int key_end() const { return kr1 > 0 ? chunk + kr1 : kr0; }
  DCPP_HOST_DEVICE DCPP_FORCE_INLINE int query_end() const { return qr1 > 0 ? chunk + qr1 : qr0; }
  //! Whether the key rows [lo, hi) hold a padding row (the gap after the first half's real rows
  //! or the tail after the second half's).
  DCPP_HOST_DEVICE DCPP_FORCE_INLINE bool keys_padded(int lo, int hi) const {
    return (kr0 < chunk && lo < chunk && hi > kr0) || hi > key_end();
  }
  DCPP_HOST_DEVICE DCPP_FORCE_INLINE bool queries_padded(int lo, int hi) const {
    return (qr0 < chunk && lo < chunk && hi > qr0) || hi > query_end();
  }
};

//! A block's work-list entry: local rows [row0, row1) of one sequence.
struct attention_block {
  int row0 = 0, row1 = 0;
  attention_sequence seq{};
};

inline DCPP_HOST_DEVICE attention_sequence attention_sequence_of(const attention_layout& l, int s) {
  attention_sequence q;
  q.base = l.offset[s];
  q.len = l.offset[s + 1] - q.base;
  q.chunk = q.len / 2;
  q.qr0 = l.q_real[2 * s], q.qr1 = l.q_real[2 * s + 1];
  q.kr0 = l.kv_real[2 * s], q.kr1 = l.kv_real[2 * s + 1];
  return q;
}

//! Work-list entry `tile` of a step: its rows and their sequence (global loads; kernels that
//! are short of registers call it again where they need the facts instead of keeping them).
template <class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE attention_block attention_block_of(const attention_params<T>& p,
                                                                      int tile) {
  return {p.tiles.begin[tile], p.tiles.end[tile],
          attention_sequence_of(p.layout, p.tiles.seq[tile])};
}

//! Row (within a warp's 16 MW rows) of fragment row r: slice r / 2, half r % 2 of the m16n8
//! accumulator, lane group g = lane / 4; its two values are x[2 (r % 2)] and x[2 (r % 2) + 1].
DCPP_HOST_DEVICE DCPP_FORCE_INLINE int attention_fragment_row(int r, int g) {
  return 16 * (r >> 1) + g + 8 * (r & 1);
}

//! Key rows [lo, hi) that query rows up to q1 (exclusive, local) can see in a step of `kind`:
//! trimmed to the real keys, so only tiles at a boundary need a mask.
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_key_range(ring_step_kind kind, const attention_sequence& q, int q1, int& lo, int& hi) {
  lo = 0;
  hi = kind == ring_step_kind::lower ? q.kr0 : q.key_end();
  if (kind == ring_step_kind::diagonal)
    hi = attention_min(hi, q1);
}

//! Whether local query row `i` sees at least one key in a step of `kind`: the first real key
//! (0, or the second half's first when the first half has none) lies in its key range.
DCPP_HOST_DEVICE DCPP_FORCE_INLINE bool attention_row_sees_key(ring_step_kind kind,
                                                               const attention_sequence& q, int i) {
  int lo = 0, hi = 0;
  attention_key_range(kind, q, i + 1, lo, hi);
  const int first = q.kr0 > 0 ? 0 : q.kr1 > 0 ? q.chunk : hi;
  return first >= lo && first < hi;
}

//! Query rows [lo, hi) that see key rows from k0 (local) on, trimmed to the real queries.
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_query_range(ring_step_kind kind, const attention_sequence& q, int k0, int& lo, int& hi) {
  hi = q.query_end();
  lo = kind == ring_step_kind::upper ? q.chunk : 0;
  if (kind == ring_step_kind::diagonal)
    lo = k0;
}

//! What a block over query rows (forward, dQ) works out before its loop: the row strides of Q
//! and O ([tokens, heads, DQK / DV]) and of K and V ([tokens, kv_heads, DQK / DV]), the first
//! K and V row of the sequence for KV head `hk`, and the visible key range [k_lo, k_hi) in tiles
//! of `bn` keys.
template <int DQK, int DV, class T>
struct attention_query_block {
  std::int64_t q_stride, o_stride, k_stride, v_stride;
  const T* k_base;
  const T* v_base;
  int k_lo, k_hi, n_tiles;
  DCPP_HOST_DEVICE DCPP_FORCE_INLINE attention_query_block(const attention_params<T>& p,
                                                           const attention_sequence& sq, int hk,
                                                           int row1, int bn)
      : q_stride(static_cast<std::int64_t>(p.heads) * DQK),
        o_stride(static_cast<std::int64_t>(p.heads) * DV),
        k_stride(static_cast<std::int64_t>(p.kv_heads) * DQK),
        v_stride(static_cast<std::int64_t>(p.kv_heads) * DV),
        k_base(p.k + static_cast<std::int64_t>(sq.base) * k_stride + hk * DQK),
        v_base(p.v + static_cast<std::int64_t>(sq.base) * v_stride + hk * DV) {
    attention_key_range(p.kind, sq, row1 - sq.base, k_lo, k_hi);
    n_tiles = k_hi > k_lo ? (k_hi - k_lo + bn - 1) / bn : 0;
  }
};

//! Per fragment row (g, g + 8) of a warp's 16 query rows: the final LSE in log2 units and
//! rowsum(dO * O). A row that is padding, past the tile or sees nothing gets LSE +inf, so its P
//! is exactly 0 without a mask.
template <class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_row_stats(const attention_params<T>& p, const attention_sequence& sq, int local_row,
                    int row1, int h, float& lse2, float& dsum) {
  const int row = sq.base + local_row;
  lse2 = attention_pos_inf();
  dsum = 0.0f;
  if (row < row1 && sq.query_real(local_row)) {
    const std::int64_t at = static_cast<std::int64_t>(row) * p.heads + h;
    const float lse = p.lse_final[at];
    if (lse != attention_neg_inf()) {
      lse2 = lse * attention_log2e;
      dsum = p.dsum[at];
    }
  }
}

} // namespace detail

} // namespace dcpp::kernels
