// THD ring attention, the kernel bodies (device-safe, SIMT layer): the per-step partial attention
// (forward), the LSE merge, and the backward (row sums D = rowsum(dO * O), dQ, dK/dV), over a
// packed buffer whose samples are split in zigzag chunks over a CP group (DESIGN.md section 2).
//
// Every rank of a group holds the same local geometry: local sequence s occupies rows
// [offset[s], offset[s+1]), its first half is the rank's chunk r, its second half chunk 2cp-1-r.
// A ring step pairs the rank's Q with the K/V of one rank of the group (the KV owner):
//   diagonal  the rank's own K/V: causal over the two local chunks (local order = global order);
//   lower     K/V of an earlier rank: every Q row sees the first half of K/V (no mask);
//   upper     K/V of a later rank: the second half of Q sees all of K/V (no mask).
// Real tokens are a prefix of each sample, hence of each chunk: `q_real` / `kv_real` give the
// real rows of each half; padding keys are never visible and padding queries see nothing (O = 0,
// LSE = -inf). Tiles: each block runs one row range of one sequence (a work list built on the
// host) for one head, in FlashAttention-2's structure: 16-byte cp.async copies into shared
// memory overlapped with the math, ldmatrix fragments, P and dS kept in registers as mma A
// operands, masks only on tiles at a boundary. Warps own 16 rows and use the m16n8k16 warp matrix
// instruction for 16-bit inputs, fp32 FMAs with the same fragment layout for fp32 inputs.
// Accumulation is fp32. Head dims: Q/K `DQK` and V `DV` (64, 96, 128, 192, 256, and MLA's 192/128).
// Wrapped for CUDA in ring_attention.cuh, run on the CPU by dcpp/attention/ring.hpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "dcpp/core/config.hpp"
#include "dcpp/core/float16.hpp"
#include "dcpp/core/math.hpp"
#include "dcpp/core/simt.hpp"

namespace dcpp::kernels {

//! Which part of the causal matrix a ring step covers (see the file comment).
enum class ring_step_kind : int { diagonal = 0, lower = 1, upper = 2 };

//! Local geometry of the group's buffers: `offset` [sequences + 1] first local row of each
//! sequence (even lengths: two equal halves); `q_real` / `kv_real` [2 * sequences] real rows of
//! each half on this rank / on the KV owner.
struct attention_layout {
  const std::int32_t* offset = nullptr;
  const std::int32_t* q_real = nullptr;
  const std::int32_t* kv_real = nullptr;
  int sequences = 0;
};

//! A work list: tile t covers local rows [begin[t], end[t]) of sequence seq[t].
struct attention_tiles {
  const std::int32_t* seq = nullptr;
  const std::int32_t* begin = nullptr;
  const std::int32_t* end = nullptr;
  int count = 0;
};

//! Parameters of the attention kernels. Q/dQ are [tokens, heads, DQK], O/dO [tokens, heads, DV],
//! K/dK [tokens, kv_heads, DQK], V/dV [tokens, kv_heads, DV] (heads a multiple of kv_heads:
//! GQA/MQA), LSE and D [tokens, heads], all row-major, every buffer 16-byte aligned (cp.async);
//! `scale` multiplies QK^T before the softmax (natural base). Outputs do not alias inputs.
template <class T>
struct attention_params {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  float* o = nullptr;   //!< forward: partial O of the step's rows (fp32, [tokens, heads, DV])
  float* lse = nullptr; //!< forward: its LSE (natural log), -inf where no key is visible
  //! forward: `o` and `lse` already hold the result of the earlier ring steps for the step's
  //! rows; the kernel merges its partial result into them (the LSE merge fused into its epilogue,
  //! where each block owns its rows) instead of overwriting them
  bool merge = false;
  const T* out = nullptr;           //!< backward: the final O
  const T* dout = nullptr;          //!< backward: dO
  const float* lse_final = nullptr; //!< backward: the final LSE
  float* dsum = nullptr;            //!< backward: rowsum(dO * O) [tokens, heads]
  float* dq = nullptr;              //!< backward: dQ accumulator (the step adds its part)
  float* dk = nullptr;              //!< backward: dK accumulator of the KV owner's rows
  float* dv = nullptr;              //!< backward: dV accumulator of the KV owner's rows
  std::int64_t tokens = 0;
  int heads = 0, kv_heads = 0;
  float scale = 1.0f;
  ring_step_kind kind = ring_step_kind::diagonal;
  attention_layout layout;
  attention_tiles tiles;
};

//! The launches whose buffers attention_overlap checks.
enum class attention_pass : int {
  forward,  //!< writes o, lse from q, k, v
  dsum,     //!< the backward's pre-pass: writes dsum from out, dout
  backward, //!< a step's dQ and dK/dV: writes dq, dk, dv from q, k, v, out, dout, lse_final, dsum
};

//! The checked form of "outputs do not alias inputs": the name of the first output of `pass`
//! whose bytes overlap an input it is computed from or another of its outputs, or nullptr when
//! all are disjoint (null buffers are skipped). Q/dQ, O/dO, LSE/D span `tokens` rows, K/V/dK/dV
//! as many (every rank of a ring holds the same count). On a GPU an overlap is a race: blocks
//! read rows other blocks are writing. The CUDA launchers return cudaErrorInvalidValue on it.
template <class T>
const char* attention_overlap(const attention_params<T>& p, int dqk, int dv, attention_pass pass) {
  struct range {
    const char* name;
    const void* data;
    std::int64_t bytes;
  };
  const std::int64_t n = p.tokens, h = p.heads, hk = p.kv_heads;
  const range q{"q", p.q, n * h * dqk * std::int64_t{sizeof(T)}},
      k{"k", p.k, n * hk * dqk * std::int64_t{sizeof(T)}},
      v{"v", p.v, n * hk * dv * std::int64_t{sizeof(T)}},
      out{"out", p.out, n * h * dv * std::int64_t{sizeof(T)}},
      dout{"dout", p.dout, n * h * dv * std::int64_t{sizeof(T)}},
      lse_final{"lse_final", p.lse_final, n * h * 4}, o{"o", p.o, n * h * dv * 4},
      lse{"lse", p.lse, n * h * 4}, dsum{"dsum", p.dsum, n * h * 4},
      dq{"dq", p.dq, n * h * dqk * 4}, dk{"dk", p.dk, n * hk * dqk * 4},
      dv_{"dv", p.dv, n * hk * dv * 4};
  const auto overlap = [](const range& a, const range& b) {
    return a.bytes > 0 && b.bytes > 0 &&
           bytes_overlap(a.data, static_cast<std::uint64_t>(a.bytes), b.data,
                         static_cast<std::uint64_t>(b.bytes));
  };
  const auto first = [&](std::initializer_list<range> outputs,
                         std::initializer_list<range> inputs) -> const char* {
    for (auto w = outputs.begin(); w != outputs.end(); ++w) {
      for (const range& r : inputs)
        if (overlap(*w, r))
          return w->name;
      for (auto x = outputs.begin(); x != w; ++x)
        if (overlap(*w, *x))
          return w->name;
    }
    return nullptr;
  };
  switch (pass) {
  case attention_pass::forward: return first({o, lse}, {q, k, v});
  case attention_pass::dsum: return first({dsum}, {out, dout});
  case attention_pass::backward: break;
  }
  return first({dq, dk, dv_}, {q, k, v, out, dout, lse_final, dsum});
}

//! Whether dcpp's kernels take a head shape: Q/K head dim `DQK`, V head dim `DV`.
constexpr bool attention_head_shape_supported(int dqk, int dv) noexcept {
  return (dqk == dv && (dqk == 64 || dqk == 96 || dqk == 128 || dqk == 192 || dqk == 256)) ||
         (dqk == 192 && dv == 128); // MLA (DeepSeek): 128 + 64 rotary for Q/K, 128 for V
}

//! Tiles of the attention kernels for Q/K head dim DQK and V head dim DV (FlashAttention-2's
//! structure on mma.sync): 4 warps, each owning one or two 16-row slices of the block's rows
//! (queries in the forward and dQ, keys in dK/dV; see forward_slices, backward_slices), so that
//! a warp's S/P fragments and its O (or dQ, dK, dV) accumulator stay in registers. `inner` rows per
//! inner step (keys, or queries in dK/dV): 64 while the head dims are at most 128, 32 above (the
//! accumulator of a 256-wide O takes 128 registers per lane; 64 more for S would spill).
//! Shared-memory rows are padded by 16 bytes so that the eight 16-byte rows of an ldmatrix or a
//! cp.async wavefront fall in distinct banks (row strides of 144, 208, 272, 400 and 528 bytes are 4
//! banks apart modulo 32). dK/dV run as two kernels (dV, then dK) where the two accumulators would
//! not fit in registers together (split_dkv). The numbers come from the register and shared-memory
//! budget (ptxas report, docs/kernels.md), not from a device measurement (none available).
template <int DQK, int DV, class T>
struct attention_tile {
  static_assert(attention_head_shape_supported(DQK, DV),
                "head dims (Q/K, V): 64, 96, 128, 192, 256 each, or (192, 128)");
  static constexpr int warps = 4;
  static constexpr int threads = warps * simt::warp_size;
  static constexpr int rows = 16 * warps; //!< rows per block of one-slice warps (and of the merge)
  //! rows per inner step; fp32 (no tensor cores, P staged in shared memory) takes 16 so that its
  //! doubled tile bytes fit (dK/dV at head dim 256: 205 KB, within sm_90's 227 KB, not sm_80's)
  static constexpr int inner = sizeof(T) == 4 ? 16 : (DQK > 128 || DV > 128) ? 32 : 64;
  //! The forward's warps own two 16-row slices (32 rows, 128 per block) where the registers
  //! allow it, as FlashAttention-2 does: each K or V fragment from shared memory then feeds two
  //! mma.sync, halving the shared-memory traffic per instruction (docs/kernels.md). 16-bit
  //! inputs with head dims up to 128 (O takes 2 x DV / 4 registers per lane; MLA's 192-wide Q
  //! slices spilled 4-24 bytes).
  static constexpr int forward_slices = sizeof(T) == 2 && DQK <= 128 && DV <= 128 ? 2 : 1;
  static constexpr int forward_rows = 16 * forward_slices * warps;
  //! keys per inner step of the forward: 32 with two slices per warp above head dim 64 (64
  //! spilled 300 bytes at 128 on sm_90: S of 64 keys and O of 128 columns for 32 rows are 192
  //! registers per lane); 16 at head dim 256 (32 spilled 120 bytes on sm_90 once the clean and
  //! the masked tile each had their own instance)
  static constexpr int forward_inner = DV >= 256 && inner > 16                        ? 16
                                       : forward_slices == 2 && (DQK > 64 || DV > 64) ? 32
                                                                                      : inner;
  //! The backward's warps own two 16-row slices too where the forward's do (dQ: 32 query rows,
  //! dK/dV: 32 key rows per warp, 128 per block): every K/V fragment of dQ and every Q/dO
  //! fragment of dK/dV then feeds two mma.sync (docs/kernels.md, the backward's model).
  static constexpr int backward_slices = forward_slices;
  static constexpr int backward_rows = 16 * backward_slices * warps;
  //! keys per inner step of dQ: 32 with two slices per warp (S and dP of 32 keys for 32 rows are
  //! 64 registers per lane beside dQ's 4 DQK / 4); 16 at head dim 256 (32 spilled 8 bytes on
  //! sm_80)
  static constexpr int dq_inner = backward_slices == 2 ? 32 : DQK >= 256 && inner > 16 ? 16 : inner;
  //! queries per inner step of dK/dV, whose two accumulators leave less room: 32 from head dim
  //! 128 on (at 64 the S^T and dP^T fragments spilled 20 bytes at 128/128 on sm_90) and with two
  //! slices per warp (S^T and dP^T of 32 keys)
  static constexpr int dkv_inner =
      (DQK + DV >= 256 || backward_slices == 2) && inner > 32 ? 32 : inner;
  static constexpr int pad = 16 / static_cast<int>(sizeof(T));
  static constexpr int ldq = DQK + pad; //!< row stride of the Q/K tiles
  static constexpr int ldv = DV + pad;  //!< row stride of the V/dO tiles
  static constexpr int pld = inner + pad;
  //! dV and dK in two kernels: when their accumulators for the warp's rows would not fit in
  //! registers together (4 (DQK + DV) MW / 4 fp32 per lane above 128 + the S^T and dP^T tiles).
  static constexpr bool split_dkv = DQK + DV > (backward_slices == 2 ? 128 : 256);
  //! fp32 inputs have no tensor-core path: P (and dS) go through a per-warp shared tile.
  static constexpr int staging = std::is_same_v<T, float> ? warps * 16 * pld : 0;
  //! Dynamic shared memory of each kernel, in bytes. Forward: Q, one K and one V tile (the K
  //! of the next step loads while P V runs, the V while Q K^T runs). dQ: Q, dO, two K tiles, one
  //! V. dK/dV: the block's K and V, two stages of Q and dO, and their LSE and D rows.
  static constexpr std::size_t forward_shared =
      (forward_rows * ldq + forward_inner * ldq + forward_inner * ldv + staging) * sizeof(T);
  static constexpr std::size_t dq_shared =
      (backward_rows * ldq + backward_rows * ldv + 2 * dq_inner * ldq + dq_inner * ldv + staging) *
      sizeof(T);
  static constexpr std::size_t dkv_shared = (backward_rows * ldq + backward_rows * ldv +
                                             2 * dkv_inner * ldq + 2 * dkv_inner * ldv + staging) *
                                                sizeof(T) +
                                            4 * dkv_inner * sizeof(float);
};

namespace detail {

DCPP_HOST_DEVICE constexpr float attention_neg_inf() noexcept {
  return -__builtin_huge_valf();
}
DCPP_HOST_DEVICE constexpr float attention_pos_inf() noexcept {
  return __builtin_huge_valf();
}
DCPP_HOST_DEVICE constexpr float attention_nan() noexcept {
  return __builtin_nanf("");
}
inline constexpr float attention_log2e = 1.4426950408889634f;
inline constexpr float attention_ln2 = 0.6931471805599453f;

DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_exp2(float x) {
#if defined(__CUDA_ARCH__)
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_log(float x) {
#if defined(__CUDA_ARCH__)
  return logf(x);
#else
  return std::log(x);
#endif
}
//! The larger of a and b, NaN when either is NaN: the online softmax's running max must not
//! step over a NaN score (a plain `a > b ? a : b` drops a NaN that a later key follows, and the
//! row's LSE came out finite and wrong). One FMNMX.NAN on the device (PTX max.NaN, sm_80+).
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_max(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a != a ? a : (a > b ? a : b); // b NaN: a > b is false, b is returned
#endif
}
DCPP_HOST_DEVICE DCPP_FORCE_INLINE int attention_min(int a, int b) {
  return a < b ? a : b;
}

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

//! Copies `rows` rows of D elements (global row stride `stride` elements) into shared `dst`
//! [CAP x LD] with 16-byte cp.async; rows from `rows` to CAP become zero (cp.async's zero fill),
//! so masked keys multiply zeros, never poison. Every thread of the block issues its share; the
//! caller commits the group. Rows and the global buffers are 16-byte aligned (checked on entry
//! to the ring).
template <int D, int LD, int CAP, int THREADS, class T, class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_copy(Ctx& ctx, T* dst, const T* src,
                                                       std::int64_t stride, int rows) {
  constexpr int per_vector = 16 / static_cast<int>(sizeof(T));
  constexpr int per_row = D / per_vector;
  constexpr int total = CAP * per_row;
  const int first = static_cast<int>(simt::thread_rank(ctx));
  // a row stride is heads * D elements (< 2^21 for any real model) and CAP <= 128 rows: the
  // offsets fit 32 bits, which keeps one register per copy live across the main loop, not two
  const int stride32 = static_cast<int>(stride);
  DCPP_UNROLL
  for (int i = 0; i < (total + THREADS - 1) / THREADS; ++i) {
    const int idx = first + i * THREADS;
    if (total % THREADS == 0 || idx < total) {
      const int r = idx / per_row, c = (idx % per_row) * per_vector;
      const bool valid = r < rows;
      ctx.cp_async_16(dst + r * LD + c, src + (valid ? r * stride32 + c : 0), valid);
    }
  }
}

//! Maximum / sum over the four lanes of a quad (the lanes holding one fragment row).
template <class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_quad_max(Ctx& ctx, float x) {
  x = attention_max(x, ctx.shuffle_xor(x, 1));
  return attention_max(x, ctx.shuffle_xor(x, 2));
}
template <class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_quad_sum(Ctx& ctx, float x) {
  x += ctx.shuffle_xor(x, 1);
  return x + ctx.shuffle_xor(x, 2);
}

//! One ldmatrix.x4 of B (two n-tiles: registers 0-1 and 2-3) against the A fragments of MW
//! 16-row slices: acc[mw * stride] and acc[mw * stride + 1] += A_mw B.
template <int MW, class T, class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_mma_slices(Ctx& ctx, const simt::mma_a_fragment (&af)[MW],
                     const simt::ldmatrix_fragment<4>& fb, simt::mma_accumulator* acc, int stride) {
  DCPP_UNROLL
  for (int mw = 0; mw < MW; ++mw) {
    simt::mma_accumulator* c = acc + mw * stride;
    c[0] = ctx.template mma_m16n8k16<T>(af[mw], {{fb.x[0], fb.x[1]}}, c[0]);
    c[1] = ctx.template mma_m16n8k16<T>(af[mw], {{fb.x[2], fb.x[3]}}, c[1]);
  }
}

//! acc[mw * NT + nt] (16 x 8 each) += A B^T over K columns: A is MW * 16 rows of `a` (stride
//! lda), B the NT * 8 rows of `b` (stride ldb); both row-major in shared memory, the reduction
//! along their rows (S = Q K^T, dP = dO V^T, S^T = K Q^T, ...). 16-bit inputs: per 16 columns
//! one ldmatrix.x4 for each 16-row slice of A and one per pair of n-tiles of B, each B fragment
//! feeding MW mma.sync (MW = 2 halves B's shared-memory traffic per instruction). fp32: the same
//! fragments computed with FMAs from shared memory (fp32 products, k order).
template <int K, int NT, int MW = 1, class T, class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_gemm_abt(Ctx& ctx, simt::mma_accumulator* acc, const T* a, int lda, const T* b, int ldb) {
  static_assert(K % 16 == 0 && NT % 2 == 0);
  const unsigned lane = simt::lane_of(ctx);
  if constexpr (std::is_same_v<T, float>) {
    DCPP_UNROLL
    for (int mw = 0; mw < MW; ++mw) {
      DCPP_UNROLL
      for (int nt = 0; nt < NT; ++nt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const simt::mma_coord c = simt::mma_c_coord(lane, e);
          const float* ar = a + (mw * 16 + c.row) * lda;
          const float* br = b + (nt * 8 + c.col) * ldb;
          float s = acc[mw * NT + nt].x[e];
          DCPP_NO_UNROLL
          for (int k = 0; k < K; ++k)
            s += ar[k] * br[k];
          acc[mw * NT + nt].x[e] = s;
        }
      }
    }
  } else {
    const int l = static_cast<int>(lane);
    // A: lanes 0-15 address rows 0-15 at column 0, lanes 16-31 the same rows at column 8;
    // B: lanes 8m..8m+7 address rows (l % 8) + 8 (m / 2) at column 8 (m % 2).
    const T* a_row = a + (l % 16) * lda + 8 * (l / 16);
    const T* b_row = b + (l % 8 + 8 * (l / 16)) * ldb + 8 * ((l / 8) % 2);
    DCPP_UNROLL
    for (int kk = 0; kk < K / 16; ++kk) {
      simt::mma_a_fragment af[MW];
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        const auto fa = ctx.template ldmatrix<4, false>(a_row + mw * 16 * lda + kk * 16);
        af[mw] = {{fa.x[0], fa.x[1], fa.x[2], fa.x[3]}};
      }
      DCPP_UNROLL
      for (int np = 0; np < NT / 2; ++np) {
        const auto fb = ctx.template ldmatrix<4, false>(b_row + np * 16 * ldb + kk * 16);
        attention_mma_slices<MW, T>(ctx, af, fb, acc + 2 * np, NT);
      }
    }
  }
}

//! `x` (two 16-bit T, as ldmatrix returns them) with each infinity or NaN set to +0; `found`
//! set when there was one (all exponent bits set: 0x7c00 in half, 0x7f80 in bfloat16).
template <class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE std::uint32_t attention_finite_pair(std::uint32_t x,
                                                                       bool& found) {
  constexpr std::uint32_t e = std::is_same_v<T, half> ? 0x7c00u : 0x7f80u;
  const bool low = (x & e) == e, high = ((x >> 16) & e) == e;
  found = found || low || high;
  return x & (low ? 0xffff0000u : 0xffffffffu) & (high ? 0x0000ffffu : 0xffffffffu);
}

//! After attention_gemm_pb<..., Finite = true> took B's infinities and NaNs as 0: adds
//! P[i, k] B[k, d] for each such B[k, d] (k < keys) to the rows i of the warp that see key k
//! (`visible(i, k)`, i the row in the warp's MW * 16, k the key in the tile), and to no other.
//! Warp-wide and uniform: every lane reads each element of B (a broadcast), the weight comes from
//! the quad lane holding column k. Taken only when the tile holds such a value, which normal
//! training never gives, so it is written for exactness, not speed.
template <int K, int DV, int MW, class T, class Ctx, class Visible>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_add_nonfinite(Ctx& ctx, simt::mma_accumulator* acc, const simt::mma_accumulator* pfrag,
                        const T* b, int ldb, int keys, const Visible& visible) {
  constexpr int KT = K / 8, DT = DV / 8;
  const unsigned lane = simt::lane_of(ctx);
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  DCPP_NO_UNROLL
  for (int k = 0; k < keys; ++k) {
    DCPP_NO_UNROLL
    for (int d = 0; d < DV; ++d) {
      const float x = to_float(b[k * ldb + d]);
      if (x - x == 0.0f)
        continue; // finite: already in the product
      const bool odd_key = k % 2 != 0, odd_column = d % 2 != 0;
      const int key_tile = k / 8, column_tile = d / 8;
      const bool my_column = t == (d % 8) / 2;
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        DCPP_UNROLL
        for (int h = 0; h < 2; ++h) {
          // P[g + 8h, k] lives in lane 4g + (k % 8) / 2, element 2h + k % 2 of fragment k / 8;
          // selects, not indexing, keep the fragments in registers
          float mine = 0.0f;
          DCPP_UNROLL
          for (int nt = 0; nt < KT; ++nt) {
            const simt::mma_accumulator& f = pfrag[mw * KT + nt];
            mine = nt == key_tile ? (odd_key ? f.x[2 * h + 1] : f.x[2 * h]) : mine;
          }
          const float w = ctx.shuffle(mine, 4 * g + (k % 8) / 2);
          // P as the product took it: rounded to T for mma.sync
          const float add = to_float(from_float<T>(w)) * x;
          const bool here = my_column && visible(mw * 16 + g + 8 * h, k);
          DCPP_UNROLL
          for (int dt = 0; dt < DT; ++dt) {
            simt::mma_accumulator& c = acc[mw * DT + dt];
            const bool hit = here && dt == column_tile;
            c.x[2 * h] = hit && !odd_column ? c.x[2 * h] + add : c.x[2 * h];
            c.x[2 * h + 1] = hit && odd_column ? c.x[2 * h + 1] + add : c.x[2 * h + 1];
          }
        }
      }
    }
  }
}

//! acc[mw * DT + dt] (16 x 8 each) += P B, where P (MW * 16 x K) is held in registers as K/8
//! accumulator fragments per 16-row slice (pfrag[mw * K/8 + nt], the S-shaped output of
//! attention_gemm_abt) and B (K x DT*8) is row-major in shared memory at `b` (stride ldb):
//! O += P V, dQ += dS K, dV += P^T dO, ... 16-bit inputs: the accumulators of n-tiles 2kk and
//! 2kk+1 are exactly the A fragment of the k-slice kk (rows g, g+8; columns 2t, 2t+1 and +8), so
//! P never leaves registers; B comes by ldmatrix.x4.trans, two n-tiles per load, each feeding MW
//! mma.sync. fp32: P goes through the warp's 16-row `staging` tile, one slice at a time.
//! `Finite`: B's infinities and NaNs count as 0, and `*nonfinite` is set on a lane that met one
//! (a masked tile's P holds exact zeros for pairs that do not see each other, and 0 x NaN inside
//! the product would reach rows that never see that key; attention_add_nonfinite adds the
//! values back for the pairs that do).
template <int K, int DT, int MW = 1, bool Finite = false, class T, class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
attention_gemm_pb(Ctx& ctx, simt::mma_accumulator* acc, const simt::mma_accumulator* pfrag,
                  const T* b, int ldb, T* staging, int sld, bool* nonfinite = nullptr) {
  static_assert(K % 16 == 0 && DT % 2 == 0);
  constexpr int KT = K / 8;
  const unsigned lane = simt::lane_of(ctx);
  if constexpr (std::is_same_v<T, float>) {
    DCPP_UNROLL
    for (int mw = 0; mw < MW; ++mw) {
      DCPP_UNROLL
      for (int nt = 0; nt < KT; ++nt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const simt::mma_coord c = simt::mma_c_coord(lane, e);
          staging[c.row * sld + nt * 8 + c.col] = pfrag[mw * KT + nt].x[e];
        }
      }
      ctx.sync_warp();
      DCPP_UNROLL
      for (int dt = 0; dt < DT; ++dt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const simt::mma_coord c = simt::mma_c_coord(lane, e);
          float s = acc[mw * DT + dt].x[e];
          DCPP_NO_UNROLL
          for (int k = 0; k < K; ++k) {
            float bv = b[k * ldb + dt * 8 + c.col];
            if constexpr (Finite)
              if (!(bv - bv == 0.0f)) // inf or NaN
                *nonfinite = true, bv = 0.0f;
            s += staging[c.row * sld + k] * bv;
          }
          acc[mw * DT + dt].x[e] = s;
        }
      }
      ctx.sync_warp(); // the staging tile is rewritten next
    }
  } else {
    const int l = static_cast<int>(lane);
    // lanes 8m..8m+7 address rows (l % 8) + 8 (m % 2) at column 8 (m / 2): with .trans the four
    // matrices are B's (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
    const T* b_row = b + (l % 8 + 8 * ((l / 8) % 2)) * ldb + 8 * (l / 16);
    DCPP_UNROLL
    for (int kk = 0; kk < K / 16; ++kk) {
      simt::mma_a_fragment af[MW];
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        const simt::mma_accumulator& lo = pfrag[mw * KT + 2 * kk];
        const simt::mma_accumulator& hi = pfrag[mw * KT + 2 * kk + 1];
        af[mw] = {{simt::mma_pack(from_float<T>(lo.x[0]), from_float<T>(lo.x[1])),
                   simt::mma_pack(from_float<T>(lo.x[2]), from_float<T>(lo.x[3])),
                   simt::mma_pack(from_float<T>(hi.x[0]), from_float<T>(hi.x[1])),
                   simt::mma_pack(from_float<T>(hi.x[2]), from_float<T>(hi.x[3]))}};
      }
      DCPP_UNROLL
      for (int dp = 0; dp < DT / 2; ++dp) {
        auto fb = ctx.template ldmatrix<4, true>(b_row + kk * 16 * ldb + dp * 16);
        if constexpr (Finite) {
          DCPP_UNROLL
          for (int i = 0; i < 4; ++i)
            fb.x[i] = attention_finite_pair<T>(fb.x[i], *nonfinite);
        }
        attention_mma_slices<MW, T>(ctx, af, fb, acc + 2 * dp, DT);
      }
    }
  }
}

//! Two adjacent fp32 values to global memory in one 8-byte store (`dst` 8-byte aligned), or
//! added to what is there; on the device through PTX's vector load/store (no type punning).
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_store2(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
#else
  dst[0] = a, dst[1] = b;
#endif
}
//! dst = dst * w + (a, b) for two adjacent fp32 values (8-byte aligned).
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_blend2(float* dst, float w, float a, float b) {
#if defined(__CUDA_ARCH__)
  float x, y;
  asm volatile("ld.global.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "l"(dst) : "memory");
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x * w + a), "f"(y * w + b)
               : "memory");
#else
  dst[0] = dst[0] * w + a, dst[1] = dst[1] * w + b;
#endif
}
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void attention_add2(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__)
  float x, y;
  asm volatile("ld.global.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "l"(dst) : "memory");
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x + a), "f"(y + b) : "memory");
#else
  dst[0] += a, dst[1] += b;
#endif
}

} // namespace detail

//! Forward step: block (tile, head), FlashAttention-2's loop. Q is loaded once; per key tile the
//! next K streams in (cp.async) while P V runs and V while Q K^T runs; the online softmax keeps
//! P in registers; only tiles at a boundary (the causal diagonal, a padding gap, the end of the
//! keys) are masked. Writes the partial O (fp32, 8-byte stores) and LSE of every row of the tile
//! (O = 0, LSE = -inf where nothing is visible or the query is padding).
//! Launch: grid (tiles.count, heads), attention_tile::threads threads, forward_shared bytes.
template <int DQK, int DV, class T, class Ctx>
DCPP_HOST_DEVICE void attention_forward_body(Ctx& ctx, const attention_params<T>& p) {
  using cfg = attention_tile<DQK, DV, T>;
  constexpr int MW = cfg::forward_slices, WR = 16 * MW; // 16-row slices and rows per warp
  constexpr int BM = cfg::forward_rows, BN = cfg::forward_inner, NT = BN / 8, DT = DV / 8;
  constexpr int LDQ = cfg::ldq, LDV = cfg::ldv, TH = cfg::threads;
  const int tile = static_cast<int>(ctx.block_index().x), h = static_cast<int>(ctx.block_index().y);
  const int hk = h / (p.heads / p.kv_heads);
  // The block's rows and sequence, read again where the masked tiles and the epilogue need
  // them (L1 hits) rather than kept live across the main loop, where 32-row warps need every
  // register (kept, they spilled 40 bytes at head dim 128).
  const auto block_facts = [&p, tile] { return detail::attention_block_of(p, tile); };
  const detail::attention_block blk = block_facts();
  const int row0 = blk.row0, row1 = blk.row1;
  const detail::attention_sequence& sq = blk.seq;
  T* qs = ctx.template shared_array<T>(BM * LDQ);
  T* ks = ctx.template shared_array<T>(BN * LDQ);
  T* vs = ctx.template shared_array<T>(BN * LDV);
  T* staging = ctx.template shared_array<T>(cfg::staging);
  const unsigned lane = simt::lane_of(ctx), warp = simt::warp_of(ctx);
  const detail::attention_query_block<DQK, DV, T> qb(p, sq, hk, row1, BN);
  const std::int64_t q_stride = qb.q_stride, o_stride = qb.o_stride;
  const std::int64_t k_stride = qb.k_stride, v_stride = qb.v_stride;
  const T *k_base = qb.k_base, *v_base = qb.v_base;
  const int k_lo = qb.k_lo, k_hi = qb.k_hi, n_tiles = qb.n_tiles;
  detail::attention_copy<DQK, LDQ, BM, TH>(ctx, qs, p.q + row0 * q_stride + h * DQK, q_stride,
                                           row1 - row0);
  if (n_tiles > 0)
    detail::attention_copy<DQK, LDQ, BN, TH>(ctx, ks, k_base + k_lo * k_stride, k_stride,
                                             detail::attention_min(BN, k_hi - k_lo));
  ctx.cp_async_commit(); // group: Q and the first K

  const float scale2 = p.scale * detail::attention_log2e;
  const int g = static_cast<int>(lane / 4);
  // per fragment row (slice mw, half r at index 2 mw + r): running max of scale2 * S (log2
  // units) and the lane's part of the row sum
  float m[2 * MW], l[2 * MW];
  DCPP_UNROLL
  for (int r = 0; r < 2 * MW; ++r)
    m[r] = detail::attention_neg_inf(), l[r] = 0.0f;
  simt::mma_accumulator acc[MW * DT];
  DCPP_UNROLL
  for (int dt = 0; dt < MW * DT; ++dt)
    acc[dt] = {};
  T* warp_staging = staging + warp * 16 * cfg::pld;

  // One key tile; Masked: the tile may cross the causal diagonal, a padding gap or the end of
  // the keys (a separate instance, so that the clean tiles carry no mask code at all).
  const auto step = [&](int t, auto masked_tile) {
    constexpr bool Masked = decltype(masked_tile)::value;
    const int kb = k_lo + t * BN, nk = detail::attention_min(BN, k_hi - kb);
    ctx.template cp_async_wait<0>();
    ctx.sync_block(); // K_t is in; every warp is done with V_{t-1}
    detail::attention_copy<DV, LDV, BN, TH>(ctx, vs, v_base + kb * v_stride, v_stride, nk);
    ctx.cp_async_commit();

    // A warp whose rows all precede the tile's keys (causal) skips it; the barriers stay shared.
    const bool warp_active =
        !Masked || p.kind != ring_step_kind::diagonal ||
        kb <= block_facts().row0 - block_facts().seq.base + static_cast<int>(warp) * WR + WR - 1;
    simt::mma_accumulator sc[MW * NT];
    if (warp_active) {
      DCPP_UNROLL
      for (int nt = 0; nt < MW * NT; ++nt)
        sc[nt] = {};
      detail::attention_gemm_abt<DQK, NT, MW>(ctx, sc, qs + warp * WR * LDQ, LDQ, ks, LDQ);
      const detail::attention_block mb = Masked ? block_facts() : detail::attention_block{};
      const int mrow = mb.row0 - mb.seq.base + static_cast<int>(warp) * WR;
      if (Masked && (kb + BN > k_hi || mb.seq.keys_padded(kb, kb + BN) ||
                     (p.kind == ring_step_kind::diagonal && kb + BN - 1 > mrow))) {
        DCPP_UNROLL
        for (int mw = 0; mw < MW; ++mw) {
          DCPP_UNROLL
          for (int nt = 0; nt < NT; ++nt) {
            DCPP_UNROLL
            for (int e = 0; e < 4; ++e) {
              const simt::mma_coord c = simt::mma_c_coord(lane, e);
              const int i = mrow + mw * 16 + c.row, j = kb + nt * 8 + c.col;
              const bool visible =
                  j < k_hi && mb.seq.key_real(j) && (p.kind != ring_step_kind::diagonal || j <= i);
              if (!visible)
                sc[mw * NT + nt].x[e] = detail::attention_neg_inf();
            }
          }
        }
      }
      // Online softmax in base 2.
      float mx[2 * MW];
      DCPP_UNROLL
      for (int r = 0; r < 2 * MW; ++r)
        mx[r] = m[r];
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        DCPP_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          DCPP_UNROLL
          for (int e = 0; e < 4; ++e) {
            float& x = mx[2 * mw + (e >> 1)];
            x = detail::attention_max(x, sc[mw * NT + nt].x[e] * scale2);
          }
        }
      }
      float base[2 * MW];
      DCPP_UNROLL
      for (int r = 0; r < 2 * MW; ++r) {
        mx[r] = detail::attention_quad_max(ctx, mx[r]);
        // a row with nothing visible yet keeps max -inf; subtracting 0 instead gives exp2(-inf)
        base[r] = mx[r] == detail::attention_neg_inf() ? 0.0f : mx[r];
        const float alpha = detail::attention_exp2(m[r] - base[r]);
        m[r] = mx[r];
        l[r] *= alpha;
        DCPP_UNROLL
        for (int dt = 0; dt < DT; ++dt) {
          acc[(r >> 1) * DT + dt].x[2 * (r & 1)] *= alpha;
          acc[(r >> 1) * DT + dt].x[2 * (r & 1) + 1] *= alpha;
        }
      }
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        DCPP_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          DCPP_UNROLL
          for (int e = 0; e < 4; ++e) {
            const int r = 2 * mw + (e >> 1);
            const float pv = detail::attention_exp2(sc[mw * NT + nt].x[e] * scale2 - base[r]);
            l[r] += pv;
            sc[mw * NT + nt].x[e] = pv;
          }
        }
      }
    }
    ctx.template cp_async_wait<0>();
    ctx.sync_block(); // V_t is in; every warp is done with K_t
    if (t + 1 < n_tiles) {
      const int kn = kb + BN;
      detail::attention_copy<DQK, LDQ, BN, TH>(ctx, ks, k_base + kn * k_stride, k_stride,
                                               detail::attention_min(BN, k_hi - kn));
      ctx.cp_async_commit();
    }
    if (warp_active) {
      if constexpr (Masked) {
        // V's infinities and NaNs go in only for the pairs that see them: a masked pair's P is 0,
        // and 0 x NaN in the product would reach rows that never see that key
        bool nonfinite = false;
        detail::attention_gemm_pb<BN, DT, MW, true>(ctx, acc, sc, vs, LDV, warp_staging, cfg::pld,
                                                    &nonfinite);
        float any = nonfinite ? 1.0f : 0.0f;
        DCPP_UNROLL
        for (int mask = 1; mask < 32; mask *= 2)
          any = detail::attention_max(any, ctx.shuffle_xor(any, mask));
        if (any != 0.0f) {
          const detail::attention_block vb = block_facts();
          const int vrow = vb.row0 - vb.seq.base + static_cast<int>(warp) * WR;
          detail::attention_add_nonfinite<BN, DV, MW, T>(
              ctx, acc, sc, vs, LDV, nk, [&](int i, int k) {
                const int j = kb + k;
                return j < k_hi && vb.seq.key_real(j) &&
                       (p.kind != ring_step_kind::diagonal || j <= vrow + i);
              });
        }
      } else {
        detail::attention_gemm_pb<BN, DT, MW>(ctx, acc, sc, vs, LDV, warp_staging, cfg::pld);
      }
    }
  };
  // The leading tiles before the first boundary (the diagonal at the block's first row, the
  // padding gap after the first half's real keys, the end of the keys) need no mask.
  int boundary = k_hi;
  if (sq.kr0 < sq.chunk)
    boundary = detail::attention_min(boundary, sq.kr0);
  if (p.kind == ring_step_kind::diagonal)
    boundary = detail::attention_min(boundary, row0 - sq.base + 1);
  const int n_clean = boundary > k_lo ? detail::attention_min((boundary - k_lo) / BN, n_tiles) : 0;
  int t = 0;
  DCPP_NO_UNROLL
  for (; t < n_clean; ++t)
    step(t, std::false_type{});
  DCPP_NO_UNROLL
  for (; t < n_tiles; ++t)
    step(t, std::true_type{});
  ctx.template cp_async_wait<0>(); // no copy outlives the block

  const detail::attention_block eb = block_facts();
  const int erow = eb.row0 - eb.seq.base + static_cast<int>(warp) * WR;
  DCPP_UNROLL
  for (int r = 0; r < 2 * MW; ++r) {
    l[r] = detail::attention_quad_sum(ctx, l[r]);
    const int i = erow + detail::attention_fragment_row(r, g); // local row
    const int row = eb.seq.base + i;
    float* lse = p.lse + static_cast<std::int64_t>(row) * p.heads + h;
    // Merged (p.merge): o = (o_old w_old + O w) / (w_old + w) with w = e^{lse - max}. The quad's
    // first lane reads the old LSE and shares it (every lane of the warp takes part in the
    // shuffle), so that its write below cannot overtake another lane's read.
    float old_lse = 0.0f;
    if (p.merge) {
      old_lse = lane % 4 == 0 && row < eb.row1 ? *lse : 0.0f;
      old_lse = ctx.shuffle(old_lse, static_cast<int>(lane & ~3u));
    }
    if (row >= eb.row1)
      continue;
    // a NaN sum (a NaN score) is live: its O and LSE come out NaN, not 0 and -inf
    bool live = !(l[r] <= 0.0f) && eb.seq.query_real(i);
    float sum = l[r];
    if (!live && eb.seq.query_real(i) && detail::attention_row_sees_key(p.kind, eb.seq, i)) {
      // the row sees keys, yet every score was -inf: fp32 overflowed (or Q or K held an
      // infinity), and O = 0 with LSE -inf would be finite and wrong without a word
      live = true;
      sum = detail::attention_nan();
    }
    float* o = p.o + row * o_stride + h * DV + 2 * static_cast<int>(lane % 4);
    const float part_lse = live ? m[r] * detail::attention_ln2 + detail::attention_log(sum)
                                : detail::attention_neg_inf();
    float w_old = 0.0f, w_new = live ? 1.0f / sum : 0.0f, out_lse = part_lse; // O = acc / l
    if (p.merge) {
      const float mx = detail::attention_max(old_lse, part_lse);
      if (mx == detail::attention_neg_inf()) { // neither part sees a key: O stays 0
        w_old = 1.0f, w_new = 0.0f, out_lse = mx;
      } else {
        const float a = detail::attention_exp2((old_lse - mx) * detail::attention_log2e);
        const float b = detail::attention_exp2((part_lse - mx) * detail::attention_log2e);
        w_old = a / (a + b);
        w_new = live ? b / (a + b) / l[r] : 0.0f;
        out_lse = mx + detail::attention_log(a + b);
      }
    }
    DCPP_UNROLL
    for (int dt = 0; dt < DT; ++dt) {
      const simt::mma_accumulator& a = acc[(r >> 1) * DT + dt];
      if (p.merge)
        detail::attention_blend2(o + dt * 8, w_old, a.x[2 * (r & 1)] * w_new,
                                 a.x[2 * (r & 1) + 1] * w_new);
      else
        detail::attention_store2(o + dt * 8, a.x[2 * (r & 1)] * w_new,
                                 a.x[2 * (r & 1) + 1] * w_new);
    }
    if (lane % 4 == 0)
      *lse = out_lse;
  }
}

//! Merge of a step's partial (o_part, lse_part) into the running result (o, lse) through the
//! LSE, in fp32, for the rows of the work list: block (tile, head), any thread count.
template <int D>
struct attention_merge_params {
  float* o = nullptr;   //!< running O [tokens, heads, D]
  float* lse = nullptr; //!< running LSE [tokens, heads]
  const float* o_part = nullptr;
  const float* lse_part = nullptr;
  int heads = 0;
  attention_tiles tiles;
};

template <int D, class Ctx>
DCPP_HOST_DEVICE void attention_merge_body(Ctx& ctx, const attention_merge_params<D>& p) {
  const int tile = static_cast<int>(ctx.block_index().x), h = static_cast<int>(ctx.block_index().y);
  const int row0 = p.tiles.begin[tile], rows = p.tiles.end[tile] - row0;
  const int threads = static_cast<int>(ctx.block_dim().volume());
  const std::int64_t stride = static_cast<std::int64_t>(p.heads) * D;
  for (int idx = static_cast<int>(simt::thread_rank(ctx)); idx < rows * D; idx += threads) {
    const std::int64_t row = row0 + idx / D, at = row * p.heads + h;
    const float a = p.lse[at], b = p.lse_part[at];
    const float mx = detail::attention_max(a, b);
    if (mx == detail::attention_neg_inf())
      continue; // neither part sees a key: O stays 0
    const float wa = detail::attention_exp2((a - mx) * detail::attention_log2e);
    const float wb = detail::attention_exp2((b - mx) * detail::attention_log2e);
    float* o = p.o + row * stride + h * D + idx % D;
    *o = (*o * wa + p.o_part[row * stride + h * D + idx % D] * wb) / (wa + wb);
  }
  ctx.sync_block(); // every thread has read the old LSE
  for (int r = static_cast<int>(simt::thread_rank(ctx)); r < rows; r += threads) {
    const std::int64_t at = static_cast<std::int64_t>(row0 + r) * p.heads + h;
    const float a = p.lse[at], b = p.lse_part[at];
    const float mx = detail::attention_max(a, b);
    if (mx == detail::attention_neg_inf())
      continue;
    p.lse[at] =
        mx + detail::attention_log(detail::attention_exp2((a - mx) * detail::attention_log2e) +
                                   detail::attention_exp2((b - mx) * detail::attention_log2e));
  }
}

//! Backward pre-pass: dsum[row, h] = sum_d dO * O (fp32), one thread per (row, head).
template <int D, class T, class Ctx>
DCPP_HOST_DEVICE void attention_dsum_body(Ctx& ctx, const attention_params<T>& p) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i >= p.tokens * p.heads)
    return;
  const T* o = p.out + i * D;
  const T* d = p.dout + i * D;
  float sum = 0.0f;
  for (int c = 0; c < D; ++c)
    sum += to_float(o[c]) * to_float(d[c]);
  p.dsum[i] = sum;
}

namespace detail {

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

//! Backward dQ of a step: block (query tile, head), FlashAttention-2's dQ loop. Q and dO are
//! loaded once; per key tile S = Q K^T and dP = dO V^T give P (from the final LSE) and
//! dS = P (dP - D) in registers, and dQ += dS K with dS as the A operand. K is double-buffered:
//! the next K and V load while dS K runs. dQ is one pass per query tile over all its keys (no
//! atomics: the result is deterministic). Adds scale * dS K to p.dq for the tile's rows.
//! Launch like the forward, dq_shared bytes.
template <int DQK, int DV, class T, class Ctx>
DCPP_HOST_DEVICE void attention_dq_body(Ctx& ctx, const attention_params<T>& p) {
  using cfg = attention_tile<DQK, DV, T>;
  constexpr int MW = cfg::backward_slices, WR = 16 * MW; // 16-row slices and rows per warp
  constexpr int BM = cfg::backward_rows, BN = cfg::dq_inner, NT = BN / 8, DT = DQK / 8;
  constexpr int LDQ = cfg::ldq, LDV = cfg::ldv, TH = cfg::threads;
  const int tile = static_cast<int>(ctx.block_index().x), h = static_cast<int>(ctx.block_index().y);
  const int hk = h / (p.heads / p.kv_heads);
  const detail::attention_block blk = detail::attention_block_of(p, tile);
  const int row0 = blk.row0, row1 = blk.row1;
  const detail::attention_sequence& sq = blk.seq;
  T* qs = ctx.template shared_array<T>(BM * LDQ);
  T* dos = ctx.template shared_array<T>(BM * LDV);
  T* ks = ctx.template shared_array<T>(2 * BN * LDQ);
  T* vs = ctx.template shared_array<T>(BN * LDV);
  T* staging = ctx.template shared_array<T>(cfg::staging);
  const unsigned lane = simt::lane_of(ctx), warp = simt::warp_of(ctx);
  const detail::attention_query_block<DQK, DV, T> qb(p, sq, hk, row1, BN);
  const std::int64_t q_stride = qb.q_stride, o_stride = qb.o_stride;
  const std::int64_t k_stride = qb.k_stride, v_stride = qb.v_stride;
  const T *k_base = qb.k_base, *v_base = qb.v_base;
  const int k_lo = qb.k_lo, k_hi = qb.k_hi, n_tiles = qb.n_tiles;
  detail::attention_copy<DQK, LDQ, BM, TH>(ctx, qs, p.q + row0 * q_stride + h * DQK, q_stride,
                                           row1 - row0);
  detail::attention_copy<DV, LDV, BM, TH>(ctx, dos, p.dout + row0 * o_stride + h * DV, o_stride,
                                          row1 - row0);
  if (n_tiles > 0) {
    detail::attention_copy<DQK, LDQ, BN, TH>(ctx, ks, k_base + k_lo * k_stride, k_stride,
                                             detail::attention_min(BN, k_hi - k_lo));
    detail::attention_copy<DV, LDV, BN, TH>(ctx, vs, v_base + k_lo * v_stride, v_stride,
                                            detail::attention_min(BN, k_hi - k_lo));
  }
  ctx.cp_async_commit();

  const int warp_row = row0 - sq.base + static_cast<int>(warp) * WR;
  const int g = static_cast<int>(lane / 4);
  // per fragment row (slice mw, half r at index 2 mw + r): final LSE (log2 units) and D
  float lse2[2 * MW], dsum[2 * MW];
  DCPP_UNROLL
  for (int r = 0; r < 2 * MW; ++r)
    detail::attention_row_stats(p, sq, warp_row + detail::attention_fragment_row(r, g), row1, h,
                                lse2[r], dsum[r]);
  const float scale2 = p.scale * detail::attention_log2e;
  simt::mma_accumulator acc[MW * DT];
  DCPP_UNROLL
  for (int dt = 0; dt < MW * DT; ++dt)
    acc[dt] = {};
  T* warp_staging = staging + warp * 16 * cfg::pld;

  for (int t = 0; t < n_tiles; ++t) {
    const int kb = k_lo + t * BN;
    const T* kt = ks + (t % 2) * BN * LDQ;
    ctx.template cp_async_wait<0>();
    ctx.sync_block(); // K_t and V_t are in; every warp is done with K_{t-1}
    // causal: a warp whose rows all precede the tile's keys skips it; the barriers stay shared
    const bool warp_active = p.kind != ring_step_kind::diagonal || kb <= warp_row + WR - 1;
    simt::mma_accumulator sc[MW * NT]{}, dp[MW * NT]{}; // zero, also for GCC's flow analysis
    if (warp_active) {
      detail::attention_gemm_abt<DQK, NT, MW>(ctx, sc, qs + warp * WR * LDQ, LDQ, kt, LDQ);
      detail::attention_gemm_abt<DV, NT, MW>(ctx, dp, dos + warp * WR * LDV, LDV, vs, LDV);
      const bool masked = kb + BN > k_hi || sq.keys_padded(kb, kb + BN) ||
                          (p.kind == ring_step_kind::diagonal && kb + BN - 1 > warp_row);
      DCPP_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        DCPP_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          DCPP_UNROLL
          for (int e = 0; e < 4; ++e) {
            const int r = 2 * mw + (e >> 1);
            simt::mma_accumulator& x = sc[mw * NT + nt];
            float pv = detail::attention_exp2(x.x[e] * scale2 - lse2[r]);
            if (masked) {
              const simt::mma_coord c = simt::mma_c_coord(lane, e);
              const int i = warp_row + mw * 16 + c.row, j = kb + nt * 8 + c.col;
              if (!(j < k_hi && sq.key_real(j) && (p.kind != ring_step_kind::diagonal || j <= i)))
                pv = 0.0f;
            }
            x.x[e] = pv * (dp[mw * NT + nt].x[e] - dsum[r]); // dS
          }
        }
      }
    }
    ctx.sync_block(); // every warp is done with V_t
    if (t + 1 < n_tiles) {
      const int kn = kb + BN, nk = detail::attention_min(BN, k_hi - kn);
      detail::attention_copy<DQK, LDQ, BN, TH>(ctx, ks + ((t + 1) % 2) * BN * LDQ,
                                               k_base + kn * k_stride, k_stride, nk);
      detail::attention_copy<DV, LDV, BN, TH>(ctx, vs, v_base + kn * v_stride, v_stride, nk);
      ctx.cp_async_commit();
    }
    if (warp_active)
      detail::attention_gemm_pb<BN, DT, MW>(ctx, acc, sc, kt, LDQ, warp_staging, cfg::pld);
  }
  ctx.template cp_async_wait<0>(); // no copy outlives the block

  DCPP_UNROLL
  for (int r = 0; r < 2 * MW; ++r) {
    const int row = sq.base + warp_row + detail::attention_fragment_row(r, g);
    if (row >= row1)
      continue;
    float* dq = p.dq + row * q_stride + h * DQK + 2 * static_cast<int>(lane % 4);
    DCPP_UNROLL
    for (int dt = 0; dt < DT; ++dt) {
      const simt::mma_accumulator& a = acc[(r >> 1) * DT + dt];
      detail::attention_add2(dq + dt * 8, a.x[2 * (r & 1)] * p.scale,
                             a.x[2 * (r & 1) + 1] * p.scale);
    }
  }
}

//! Which accumulators a dK/dV launch computes (both, or one each in two launches when the two
//! would not fit in registers together: attention_tile::split_dkv).
enum class attention_dkv_part : int { both = 0, dv = 1, dk = 2 };

//! Backward dK/dV of a step: block (key tile, KV head), FlashAttention-2's dK/dV loop. K and V
//! of the block stay in shared memory; for every query head of the KV head and every query tile
//! that sees the keys, S^T = K Q^T and dP^T = V dO^T give P^T and dS^T in registers, the A
//! operands of dV += P^T dO and dK += dS^T Q. Q, dO and their LSE/D rows are double-buffered (the
//! next tile loads during this one). Adds scale * dS^T Q to p.dk and P^T dO to p.dv for the
//! tile's key rows. Launch: grid (tiles.count, kv_heads), threads as above, dkv_shared bytes.
template <int DQK, int DV, class T, attention_dkv_part Part = attention_dkv_part::both, class Ctx>
DCPP_HOST_DEVICE void attention_dkv_body(Ctx& ctx, const attention_params<T>& p) {
  using cfg = attention_tile<DQK, DV, T>;
  constexpr int MW = cfg::backward_slices, WR = 16 * MW; // 16-row slices and key rows per warp
  constexpr int BN = cfg::backward_rows, BM = cfg::dkv_inner, MT = BM / 8, DTQ = DQK / 8,
                DTV = DV / 8;
  constexpr int LDQ = cfg::ldq, LDV = cfg::ldv, TH = cfg::threads;
  constexpr bool want_dv = Part != attention_dkv_part::dk, want_dk = Part != attention_dkv_part::dv;
  constexpr bool clean_instance = MW == 2 && Part != attention_dkv_part::both;
  const int tile = static_cast<int>(ctx.block_index().x),
            hk = static_cast<int>(ctx.block_index().y);
  const int group = p.heads / p.kv_heads;
  // The block's keys and sequence and the queries that see them, read again (L1 hits) where the
  // copies, the masks and the epilogue need them rather than kept live across the main loop,
  // where 32-row warps need every register (kept, they spilled 24-40 bytes at head dim 128).
  struct facts {
    detail::attention_block blk;
    int q_lo, q_hi;
    int per_head, n_masked; //!< query tiles per query head, and of those the ones that need a mask
    //! the block's query tiles over its group of query heads, and those that need no mask
    DCPP_HOST_DEVICE int tiles(int group) const { return per_head * group; }
    DCPP_HOST_DEVICE int clean_tiles(int group) const { return (per_head - n_masked) * group; }
  };
  const auto block_facts = [&p, tile] {
    facts f{detail::attention_block_of(p, tile), 0, 0, 0, 0};
    detail::attention_query_range(p.kind, f.blk.seq, f.blk.row0 - f.blk.seq.base, f.q_lo, f.q_hi);
    f.per_head = f.q_hi > f.q_lo ? (f.q_hi - f.q_lo + BM - 1) / BM : 0;
    // A padding key in the block masks every tile; the causal diagonal masks the tiles whose first
    // query precedes the block's last key (the query range starts at the block's first key).
    // Only the split dK and dV kernels of 32-row warps have a clean instance: beside the masked
    // one it spilled in the 16-row loops (head dims 192, 256) and at head dim 64 (dK and dV in
    // one kernel); those run every tile masked.
    const int k0 = f.blk.row0 - f.blk.seq.base;
    f.n_masked = !clean_instance || f.blk.seq.keys_padded(k0, k0 + BN) ? f.per_head
                 : p.kind == ring_step_kind::diagonal
                     ? detail::attention_min(f.per_head, (BN + BM - 2) / BM)
                     : 0;
    return f;
  };
  // The block's t-th query tile: first the tiles that need no mask, every query head's in turn,
  // then the masked ones (the query range's first n_masked tiles) of every head. Sets the query
  // head (within the KV head's group) and the tile's first query (local to the sequence).
  const auto query_tile = [group](const facts& f, int t, int& hh, int& qb) {
    const int n_clean = f.per_head - f.n_masked;
    if (t < n_clean * group) {
      hh = t / n_clean;
      qb = f.q_lo + (f.n_masked + t % n_clean) * BM;
    } else {
      t -= n_clean * group;
      hh = t / f.n_masked;
      qb = f.q_lo + (t % f.n_masked) * BM;
    }
  };
  T* ks = ctx.template shared_array<T>(BN * LDQ);
  T* vs = ctx.template shared_array<T>(BN * LDV);
  T* qs = ctx.template shared_array<T>(2 * BM * LDQ);
  T* dos = ctx.template shared_array<T>(2 * BM * LDV);
  T* staging = ctx.template shared_array<T>(cfg::staging);
  float* lse_s = ctx.template shared_array<float>(2 * BM);
  float* dsum_s = ctx.template shared_array<float>(2 * BM);
  const unsigned lane = simt::lane_of(ctx), warp = simt::warp_of(ctx);
  // row strides in elements ([tokens, heads, D]; < 2^31 for any real model), from the kernel
  // parameters wherever they are used rather than kept in registers
  const auto q_stride = [&p] { return p.heads * DQK; };
  const auto o_stride = [&p] { return p.heads * DV; };
  const int k_stride = p.kv_heads * DQK, v_stride = p.kv_heads * DV;

  {
    const facts f = block_facts();
    const int key0 = f.blk.row0, key1 = f.blk.row1;
    detail::attention_copy<DQK, LDQ, BN, TH>(
        ctx, ks, p.k + static_cast<std::int64_t>(key0) * k_stride + hk * DQK, k_stride,
        key1 - key0);
    if constexpr (want_dk) // V feeds dP^T, which only dK needs
      detail::attention_copy<DV, LDV, BN, TH>(
          ctx, vs, p.v + static_cast<std::int64_t>(key0) * v_stride + hk * DV, v_stride,
          key1 - key0);
  }
  auto issue = [&](int t, int stage) {
    const facts f = block_facts();
    const detail::attention_sequence& sq = f.blk.seq;
    int hh, qb;
    query_tile(f, t, hh, qb);
    const int h = hk * group + hh;
    const int nq = detail::attention_min(BM, f.q_hi - qb);
    const std::int64_t first = sq.base + qb;
    detail::attention_copy<DQK, LDQ, BM, TH>(ctx, qs + stage * BM * LDQ,
                                             p.q + first * q_stride() + h * DQK, q_stride(), nq);
    detail::attention_copy<DV, LDV, BM, TH>(ctx, dos + stage * BM * LDV,
                                            p.dout + first * o_stride() + h * DV, o_stride(), nq);
    for (int r = static_cast<int>(simt::thread_rank(ctx)); r < BM; r += TH)
      detail::attention_row_stats(p, sq, qb + r, sq.base + f.q_hi, h, lse_s[stage * BM + r],
                                  dsum_s[stage * BM + r]);
  };
  if (block_facts().per_head > 0)
    issue(0, 0);
  ctx.cp_async_commit();

  const float scale2 = p.scale * detail::attention_log2e;
  simt::mma_accumulator dk[want_dk ? MW * DTQ : 1], dv[want_dv ? MW * DTV : 1];
  DCPP_UNROLL
  for (int dt = 0; dt < (want_dk ? MW * DTQ : 1); ++dt)
    dk[dt] = {};
  DCPP_UNROLL
  for (int dt = 0; dt < (want_dv ? MW * DTV : 1); ++dt)
    dv[dt] = {};
  T* warp_staging = staging + warp * 16 * cfg::pld;

  // Query tile t (query_tile); Masked: it may cross the causal diagonal or the block's keys hold
  // padding. Two instances, so that the clean tiles' loop carries no mask code at all.
  const auto step = [&](int t, auto masked_tile) {
    constexpr bool Masked = decltype(masked_tile)::value;
    const int stage = t % 2;
    ctx.template cp_async_wait<0>();
    ctx.sync_block(); // tile t is in; every warp is done with tile t-1's buffers
    if (t + 1 < block_facts().tiles(group)) {
      issue(t + 1, stage ^ 1);
      ctx.cp_async_commit();
    }
    const T* qt = qs + stage * BM * LDQ;
    const T* dot = dos + stage * BM * LDV;
    const float* lse2 = lse_s + stage * BM;
    [[maybe_unused]] const float* dsum = dsum_s + stage * BM; // dK's
    const facts f = block_facts();
    const detail::attention_sequence& sq = f.blk.seq;
    int hh, qb;
    query_tile(f, t, hh, qb);
    const int warp_key = f.blk.row0 - sq.base + static_cast<int>(warp) * WR; // local key of row 0
    // causal: a warp whose keys all follow the tile's queries sees none of them
    if (Masked && p.kind == ring_step_kind::diagonal && qb + BM - 1 < warp_key)
      return;
    simt::mma_accumulator st[MW * MT];
    DCPP_UNROLL
    for (int mt = 0; mt < MW * MT; ++mt)
      st[mt] = {};
    detail::attention_gemm_abt<DQK, MT, MW>(ctx, st, ks + warp * WR * LDQ, LDQ, qt, LDQ);
    const bool masked = Masked && (sq.keys_padded(warp_key, warp_key + WR) ||
                                   (p.kind == ring_step_kind::diagonal && qb < warp_key + WR - 1));
    DCPP_UNROLL
    for (int mw = 0; mw < MW; ++mw) {
      DCPP_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const simt::mma_coord c = simt::mma_c_coord(lane, e);
          const int qi = mt * 8 + c.col;
          simt::mma_accumulator& x = st[mw * MT + mt];
          float pv = detail::attention_exp2(x.x[e] * scale2 - lse2[qi]);
          if (masked) {
            const int j = warp_key + mw * 16 + c.row, i = qb + qi;
            if (!(sq.key_real(j) && (p.kind != ring_step_kind::diagonal || j <= i)))
              pv = 0.0f;
          }
          x.x[e] = pv; // P^T
        }
      }
    }
    if constexpr (want_dv)
      detail::attention_gemm_pb<BM, DTV, MW>(ctx, dv, st, dot, LDV, warp_staging, cfg::pld);
    if constexpr (want_dk) {
      simt::mma_accumulator dpt[MW * MT];
      DCPP_UNROLL
      for (int mt = 0; mt < MW * MT; ++mt)
        dpt[mt] = {};
      detail::attention_gemm_abt<DV, MT, MW>(ctx, dpt, vs + warp * WR * LDV, LDV, dot, LDV);
      DCPP_UNROLL
      for (int mt = 0; mt < MW * MT; ++mt) {
        DCPP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int qi = (mt % MT) * 8 + simt::mma_c_coord(lane, e).col;
          const float ds = st[mt].x[e] * (dpt[mt].x[e] - dsum[qi]); // dS^T
          // a masked pair (P = 0) gives dS = 0 even when its query's dsum is NaN: 0 x NaN would
          // carry a NaN query row to keys it does not see (the masked instance only)
          dpt[mt].x[e] = Masked && masked && st[mt].x[e] == 0.0f ? 0.0f : ds;
        }
      }
      detail::attention_gemm_pb<BM, DTQ, MW>(ctx, dk, dpt, qt, LDQ, warp_staging, cfg::pld);
    }
  };
  int t = 0;
  DCPP_NO_UNROLL
  for (; t < block_facts().clean_tiles(group); ++t)
    step(t, std::false_type{});
  DCPP_NO_UNROLL
  for (; t < block_facts().tiles(group); ++t)
    step(t, std::true_type{});
  ctx.template cp_async_wait<0>(); // no copy outlives the block

  const int g = static_cast<int>(lane / 4), c2 = 2 * static_cast<int>(lane % 4);
  const facts f = block_facts();
  DCPP_UNROLL
  for (int r = 0; r < 2 * MW; ++r) {
    const std::int64_t key =
        f.blk.row0 + static_cast<int>(warp) * WR + detail::attention_fragment_row(r, g);
    const int e = 2 * (r & 1);
    if (key >= f.blk.row1)
      continue;
    if constexpr (want_dk) {
      DCPP_UNROLL
      for (int dt = 0; dt < DTQ; ++dt) {
        const simt::mma_accumulator& a = dk[(r >> 1) * DTQ + dt];
        detail::attention_add2(p.dk + key * k_stride + hk * DQK + dt * 8 + c2, a.x[e] * p.scale,
                               a.x[e + 1] * p.scale);
      }
    }
    if constexpr (want_dv) {
      DCPP_UNROLL
      for (int dt = 0; dt < DTV; ++dt) {
        const simt::mma_accumulator& a = dv[(r >> 1) * DTV + dt];
        detail::attention_add2(p.dv + key * v_stride + hk * DV + dt * 8 + c2, a.x[e], a.x[e + 1]);
      }
    }
  }
}

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
