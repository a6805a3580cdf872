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

} // namespace trainer::kernels
