// THD ring attention, its traits: the ring step kinds, the packed layout and work list the host
// builds, the kernel parameters, the head shapes supported and the tile shape (rows, warps, shared
// memory) of each head shape and element type. The overview is in ring_attention.hpp.
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

} // namespace dcpp::kernels
