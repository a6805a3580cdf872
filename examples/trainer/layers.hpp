// The dense layers of the GPU trainer as kernel bodies on dcpp's SIMT layer (device-safe, fp32):
// one source that nvcc compiles for the device (layers.cu) and the tests run on the CPU through
// the host launcher against plain loops (tests/examples/test_trainer_layers.cpp). Written for
// clarity, not speed: a 16x16 shared-memory GEMM, element-wise kernels, the softmax
// cross-entropy per token, SGD with momentum. Every result is computed in a fixed order (no
// atomics), so a run is reproducible bit for bit on one device.
#pragma once

#include <cmath>
#include <cstdint>

#include "dcpp/core/config.hpp"
#include "dcpp/core/simt.hpp"

namespace trainer::kernels {

//! Global linear index of the calling thread in a 1-D launch.
template <class Ctx>
DCPP_HOST_DEVICE std::int64_t global_index(Ctx& ctx) {
  return static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
}

//! C[m x n] (row-major) = (accumulate ? C : 0) + A B, where element (i, l) of A is
//! a[i * a_row + l * a_col] and element (l, j) of B is b[l * b_row + j * b_col]: strides express
//! the transposes (dX = dY W^T, dW = X^T dY) without copies.
struct gemm_params {
  const float* a = nullptr;
  std::int64_t a_row = 0, a_col = 0;
  const float* b = nullptr;
  std::int64_t b_row = 0, b_col = 0;
  float* c = nullptr;
  std::int64_t m = 0, n = 0, k = 0;
  bool accumulate = false;
};

inline constexpr unsigned gemm_tile = 16;

//! Block (16, 16), grid (ceil(n / 16), ceil(m / 16)); shared memory gemm_shared_bytes.
inline constexpr std::size_t gemm_shared_bytes = 2 * gemm_tile * (gemm_tile + 1) * sizeof(float);

template <class Ctx>
DCPP_HOST_DEVICE void gemm_body(Ctx& ctx, const gemm_params& p) {
  constexpr unsigned t = gemm_tile, ld = gemm_tile + 1;
  const unsigned tx = ctx.thread_index().x, ty = ctx.thread_index().y;
  const std::int64_t row = static_cast<std::int64_t>(ctx.block_index().y) * t + ty;
  const std::int64_t col = static_cast<std::int64_t>(ctx.block_index().x) * t + tx;
  float* as = ctx.template shared_array<float>(t * ld);
  float* bs = ctx.template shared_array<float>(t * ld);
  float acc = 0.0f;
  for (std::int64_t k0 = 0; k0 < p.k; k0 += t) {
    const std::int64_t ak = k0 + tx, bk = k0 + ty;
    as[ty * ld + tx] = row < p.m && ak < p.k ? p.a[row * p.a_row + ak * p.a_col] : 0.0f;
    bs[ty * ld + tx] = bk < p.k && col < p.n ? p.b[bk * p.b_row + col * p.b_col] : 0.0f;
    ctx.sync_block();
    for (unsigned kk = 0; kk < t; ++kk)
      acc += as[ty * ld + kk] * bs[kk * ld + tx];
    ctx.sync_block();
  }
  if (row < p.m && col < p.n) {
    float* c = p.c + row * p.n + col;
    *c = p.accumulate ? *c + acc : acc;
  }
}

//! x[i, :] = table[ids[i], :] (ids outside [0, vocab) give a zero row). 1-D, one thread per value.
template <class Ctx>
DCPP_HOST_DEVICE void embed_body(Ctx& ctx, const float* table, const std::int32_t* ids, float* x,
                                 std::int64_t tokens, int vocab, int dim) {
  const std::int64_t i = global_index(ctx);
  if (i >= tokens * dim)
    return;
  const std::int32_t id = ids[i / dim];
  x[i] = id >= 0 && id < vocab ? table[static_cast<std::int64_t>(id) * dim + i % dim] : 0.0f;
}

//! y[i] = a[i] + b[i] (y may alias a or b).
template <class Ctx>
DCPP_HOST_DEVICE void add_body(Ctx& ctx, const float* a, const float* b, float* y, std::int64_t n) {
  const std::int64_t i = global_index(ctx);
  if (i < n)
    y[i] = a[i] + b[i];
}

//! h = max(0, u).
template <class Ctx>
DCPP_HOST_DEVICE void relu_body(Ctx& ctx, const float* u, float* h, std::int64_t n) {
  const std::int64_t i = global_index(ctx);
  if (i < n)
    h[i] = u[i] > 0.0f ? u[i] : 0.0f;
}

//! dh = u > 0 ? dh : 0 (in place).
template <class Ctx>
DCPP_HOST_DEVICE void relu_grad_body(Ctx& ctx, const float* u, float* dh, std::int64_t n) {
  const std::int64_t i = global_index(ctx);
  if (i < n && !(u[i] > 0.0f))
    dh[i] = 0.0f;
}

//! Softmax cross-entropy per token, one thread per token: where mask[i] != 0,
//! loss[i] = logsumexp(logits[i]) - logits[i, labels[i]] and
//! dlogits[i] = scale * (softmax(logits[i]) - onehot(labels[i])); elsewhere both are 0.
//! The sum of exponentials is accumulated in fp64 (like the CPU trainer).
template <class Ctx>
DCPP_HOST_DEVICE void cross_entropy_body(Ctx& ctx, const float* logits, const std::int32_t* labels,
                                         const std::uint8_t* mask, float scale, float* loss,
                                         float* dlogits, std::int64_t tokens, int vocab) {
  const std::int64_t i = global_index(ctx);
  if (i >= tokens)
    return;
  const float* l = logits + i * vocab;
  float* d = dlogits + i * vocab;
  const std::int32_t label = labels[i];
  if (mask[i] == 0 || label < 0 || label >= vocab) {
    loss[i] = 0.0f;
    for (int c = 0; c < vocab; ++c)
      d[c] = 0.0f;
    return;
  }
  float mx = l[0];
  for (int c = 1; c < vocab; ++c)
    mx = l[c] > mx ? l[c] : mx;
  double sum = 0.0;
  for (int c = 0; c < vocab; ++c)
    sum += exp(static_cast<double>(l[c] - mx));
  loss[i] = static_cast<float>(log(sum) + mx - l[label]);
  for (int c = 0; c < vocab; ++c)
    d[c] = static_cast<float>(exp(static_cast<double>(l[c] - mx)) / sum) * scale;
  d[label] -= scale;
}

//! SGD with momentum: v = momentum * v + g; w -= lr * v.
template <class Ctx>
DCPP_HOST_DEVICE void sgd_body(Ctx& ctx, float* w, const float* g, float* v, std::int64_t n,
                               float lr, float momentum) {
  const std::int64_t i = global_index(ctx);
  if (i >= n)
    return;
  v[i] = momentum * v[i] + g[i];
  w[i] -= lr * v[i];
}

//! The head-parallel stand-in layer: a linear recurrence per head and channel over whole
//! sequences (the shape of the state update in Mamba and Gated DeltaNet, made small), run on the
//! head-parallel layout after `cp2hp`. For each sequence, head h and channel c, over the real
//! tokens t in order: s_t = a_h s_{t-1} + (1 - a_h) x_t (s_{-1} = 0) and y_t = g_h s_t, with a
//! fixed decay a_h (`scan_decay`) and a learnt gate g_h. Padding rows of s and y are 0, and the
//! backward ignores padding rows of dy. Buffers are `[padded tokens][heads_here][head_dim]`
//! (`dcpp::hp_elements`): sequence i occupies rows [cu_padded[i], cu_padded[i+1]), its real
//! tokens the first cu_real[i+1] - cu_real[i] of them.
struct scan_params {
  const float* x = nullptr;  //!< input (forward)
  float* s = nullptr;        //!< the state, written by the forward, read by the backward
  float* y = nullptr;        //!< output (forward)
  const float* dy = nullptr; //!< output gradient (backward)
  float* dx = nullptr;       //!< input gradient (backward)
  //! backward: per (sequence, channel) sum over tokens of dy s, `[sequences][heads_here *
  //! head_dim]`; `scan_gate_grad_body` adds them per head.
  float* dgate_partial = nullptr;
  const float* gate = nullptr; //!< every head's gate; this rank's from `first_head`
  const std::int32_t* cu_padded = nullptr;
  const std::int32_t* cu_real = nullptr;
  int sequences = 0, heads_here = 0, first_head = 0, head_dim = 0;
};

//! a_h = 1 - 4^-(h+1): 0.75, 0.9375, ... (a longer memory for each further head).
DCPP_HOST_DEVICE inline float scan_decay(int head) {
  return 1.0f - 1.0f / static_cast<float>(std::int64_t{1} << (2 * (head + 1)));
}

//! What one thread of the recurrence works on: thread i is sequence i / part, channel i % part
//! of the rank's `part` = heads_here x head_dim; its rows are at (start + t) x part + channel.
struct scan_thread {
  std::int64_t index = 0, part = 0, channel = 0, start = 0, padded = 0, real = 0;
  float decay = 0.0f, gate = 0.0f;
  DCPP_HOST_DEVICE std::int64_t at(std::int64_t t) const { return (start + t) * part + channel; }
};
//! False for threads past the last (sequence, channel).
template <class Ctx>
DCPP_HOST_DEVICE bool scan_thread_of(Ctx& ctx, const scan_params& p, scan_thread& w) {
  w.part = std::int64_t{p.heads_here} * p.head_dim;
  w.index = global_index(ctx);
  if (w.index >= p.sequences * w.part)
    return false;
  const std::int64_t seq = w.index / w.part;
  w.channel = w.index % w.part;
  const int head = p.first_head + static_cast<int>(w.channel / p.head_dim);
  w.decay = scan_decay(head), w.gate = p.gate[head];
  w.start = p.cu_padded[seq], w.padded = p.cu_padded[seq + 1] - w.start;
  w.real = p.cu_real[seq + 1] - p.cu_real[seq];
  return true;
}

//! Forward, one thread per (sequence, channel): 1-D launch over sequences x heads_here x head_dim.
template <class Ctx>
DCPP_HOST_DEVICE void scan_forward_body(Ctx& ctx, const scan_params& p) {
  scan_thread w;
  if (!scan_thread_of(ctx, p, w))
    return;
  const float a = w.decay, g = w.gate;
  float s = 0.0f;
  for (std::int64_t t = 0; t < w.padded; ++t) {
    const std::int64_t at = w.at(t);
    s = t < w.real ? a * s + (1.0f - a) * p.x[at] : 0.0f;
    p.s[at] = s;
    p.y[at] = g * s;
  }
}

//! Backward, same threads, the recurrence reversed: r_t = g_h dy_t + a_h r_{t+1},
//! dx_t = (1 - a_h) r_t; dgate_partial = sum over real tokens of dy_t s_t.
template <class Ctx>
DCPP_HOST_DEVICE void scan_backward_body(Ctx& ctx, const scan_params& p) {
  scan_thread w;
  if (!scan_thread_of(ctx, p, w))
    return;
  const float a = w.decay, g = w.gate;
  float r = 0.0f, dg = 0.0f;
  for (std::int64_t t = w.padded - 1; t >= 0; --t) {
    const std::int64_t at = w.at(t);
    if (t >= w.real) {
      p.dx[at] = 0.0f;
      continue;
    }
    const float dy = p.dy[at];
    dg += dy * p.s[at];
    r = g * dy + a * r;
    p.dx[at] = (1.0f - a) * r;
  }
  p.dgate_partial[w.index] = dg;
}

//! dgate[first_head + h] += the partial sums of local head h, in (sequence, channel) order: one
//! thread per local head. Call it on one holder of each head only (`dcpp::head_split::
//! first_holder`), so a head several ranks hold is counted once.
template <class Ctx>
DCPP_HOST_DEVICE void scan_gate_grad_body(Ctx& ctx, const float* dgate_partial, float* dgate,
                                          int sequences, int heads_here, int first_head,
                                          int head_dim) {
  const std::int64_t h = global_index(ctx);
  if (h >= heads_here)
    return;
  const std::int64_t part = std::int64_t{heads_here} * head_dim;
  float sum = 0.0f;
  for (std::int64_t seq = 0; seq < sequences; ++seq)
    for (std::int64_t c = 0; c < head_dim; ++c)
      sum += dgate_partial[seq * part + h * head_dim + c];
  dgate[first_head + h] += sum;
}

} // namespace trainer::kernels
