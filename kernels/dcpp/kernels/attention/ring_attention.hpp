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
//
// The bodies live in rooms after FlashAttention's csrc: traits.hpp (step kinds, parameters, tile
// shapes), softmax.hpp (numerics), block_info.hpp (a block's sequence, mask and row statistics),
// gemm.hpp (copies and warp matrix products), forward.hpp, backward_dq.hpp, backward_dkv.hpp and
// elementwise.hpp.
#pragma once

#include "dcpp/kernels/attention/backward_dkv.hpp"
#include "dcpp/kernels/attention/backward_dq.hpp"
#include "dcpp/kernels/attention/elementwise.hpp"
#include "dcpp/kernels/attention/forward.hpp"
