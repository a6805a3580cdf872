// Causal depthwise conv1d over packed sequences, the kernel bodies (device-safe, SIMT layer):
// y[t,c] = act(b[c] + sum_k w[c,k] * x[t-k,c]) over channel-last [tokens, channels] buffers,
// forward and backward (the halo rows' gradients, dx, dw and db through a two-pass reduction).
// No tap crosses a sequence boundary; a segment that starts inside a sequence (a zigzag chunk of
// a context-parallel sample) reads the W-1 tokens before it from a halo buffer.
// Wrapped for CUDA in causal_conv1d.cuh, run on the CPU by dcpp/kernels/conv/causal_conv1d.hpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dcpp/core/config.hpp"
#include "dcpp/core/float16.hpp"
#include "dcpp/core/simt.hpp"

namespace dcpp::kernels {

//! The buffer as segments: contiguous token runs `[begin[s], begin[s+1])`, each the part of one
//! sequence starting at global position `position[s]` of a sequence whose first `length[s]`
//! positions are real (the rest is padding: output 0, no gradient). A segment with
//! `position[s] > 0` reads the W-1 tokens before it from halo rows `halo[s] .. halo[s]+W-2`
//! (ascending positions). Null `position` / `length` / `halo` mean: every segment is a whole
//! sequence (position 0, all real, no halo). Tokens past `begin[count]` are outside every segment.
struct conv1d_segments {
  const std::int32_t* begin = nullptr;
  const std::int64_t* position = nullptr;
  const std::int64_t* length = nullptr;
  const std::int64_t* halo = nullptr;
  int count = 0;
};

//! Parameters of the forward and backward kernels. Elements are `T` (float, half, bfloat16),
//! arithmetic is fp32. Weights `[channels, W]`, `w[c,k]` multiplies `x[t-k,c]`.
template <class T>
struct conv1d_params {
  const T* x = nullptr;      //!< [tokens, channels]
  const T* weight = nullptr; //!< [channels, W]
  const T* bias = nullptr;   //!< [channels] or null
  const T* halo_x = nullptr; //!< [halo rows, channels] or null when no segment has a halo
  T* y = nullptr;            //!< forward output [tokens, channels]
  const T* dy = nullptr;     //!< backward input [tokens, channels]
  T* dx = nullptr;           //!< backward output [tokens, channels]
  float* halo_dx = nullptr;  //!< backward output [halo rows, channels]: gradient of halo tokens
  //! Backward input: gradients of this buffer's rows computed by the ranks holding the next
  //! chunks (their halo gradients), rows ascending and distinct; added to dx before rounding.
  const std::int64_t* incoming_rows = nullptr;
  const float* incoming = nullptr; //!< [incoming_count, channels]
  std::int64_t incoming_count = 0;
  float* partial = nullptr; //!< workspace [token blocks, channels, W + 1]
  float* dweight = nullptr; //!< [channels, W]
  float* dbias = nullptr;   //!< [channels]
  std::int64_t tokens = 0;
  int channels = 0;
  bool silu = false;
  conv1d_segments seg;
};

//! Channels a thread handles when the buffers allow vectors: one 16-byte load or store.
template <class T>
inline constexpr int conv1d_vector = 16 / static_cast<int>(sizeof(T));

//! Tile of one block: 32 threads across channel vectors (a warp reads 32 * VEC consecutive
//! channels of a token: 512 contiguous bytes with 16-byte vectors, full 128-byte lines) and 4
//! groups of 32 consecutive tokens (each thread slides a W-token window through its run, so x is
//! read about once, re-primed W-1 tokens per run; the backward's dw/db partials, (W+1) fp32 per
//! channel per block, are 2.5 % of the block's own traffic for bf16 at W = 4 — 5 % with runs of
//! 16). Chosen by this reasoning, not by a device measurement (none available).
struct conv1d_tile {
  static constexpr unsigned channel_threads = 32;
  static constexpr unsigned token_groups = 4;
  static constexpr unsigned tokens_per_thread = 32;
  static constexpr unsigned tokens_per_block = token_groups * tokens_per_thread;
};

//! Dynamic shared memory of the backward kernel (per-thread dw/db partials of the block).
template <int W, int Vec>
constexpr std::size_t conv1d_backward_shared_bytes() {
  return conv1d_tile::token_groups * conv1d_tile::channel_threads * Vec * (W + 1) * sizeof(float);
}

//! Workspace bytes of the backward (the per-block dw/db partials).
inline std::size_t conv1d_backward_workspace_bytes(std::int64_t tokens, int channels, int width) {
  const std::int64_t blocks =
      (tokens + conv1d_tile::tokens_per_block - 1) / conv1d_tile::tokens_per_block;
  return static_cast<std::size_t>(blocks > 0 ? blocks : 1) * channels * (width + 1) * sizeof(float);
}

namespace detail {

//! Segment holding token t (binary search over begin), or -1 when t is past the last segment.
DCPP_HOST_DEVICE DCPP_FORCE_INLINE int conv1d_find_segment(const conv1d_segments& seg,
                                                           std::int64_t t) {
  if (seg.count <= 0 || t < seg.begin[0] || t >= seg.begin[seg.count])
    return -1;
  int lo = 0, hi = seg.count; // begin[lo] <= t < begin[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (seg.begin[mid] <= t)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

DCPP_HOST_DEVICE DCPP_FORCE_INLINE std::int64_t conv1d_position(const conv1d_segments& seg, int s) {
  return seg.position != nullptr ? seg.position[s] : 0;
}
DCPP_HOST_DEVICE DCPP_FORCE_INLINE std::int64_t conv1d_real_length(const conv1d_segments& seg,
                                                                   int s) {
  return seg.length != nullptr ? seg.length[s] : seg.begin[s + 1] - seg.begin[s];
}

//! Vec consecutive channels starting at c of row `row` as floats (one vector load when Vec > 1;
//! the launcher picks Vec > 1 only for aligned buffers with channels % Vec == 0).
template <int Vec, class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void conv1d_load(const T* base, std::int64_t row, int channels,
                                                    int c, float (&out)[Vec]) {
  const T* p = base + row * channels + c;
  if constexpr (Vec == 1) {
    out[0] = to_float(p[0]);
  } else {
    struct alignas(sizeof(T) * Vec) pack {
      T v[Vec];
    };
    pack loaded;
#if defined(__CUDA_ARCH__)
    // one vector load through PTX into 32-bit registers, then a register copy: no type punning
    static_assert(sizeof(pack) == 8 || sizeof(pack) == 16, "8- or 16-byte vectors");
    std::uint32_t w[sizeof(pack) / 4];
    if constexpr (sizeof(pack) == 16)
      asm("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
          : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
          : "l"(p));
    else
      asm("ld.global.v2.u32 {%0, %1}, [%2];\n" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    std::memcpy(&loaded, w, sizeof(pack));
#else
    std::memcpy(&loaded, p, sizeof(pack));
#endif
    DCPP_UNROLL
    for (int v = 0; v < Vec; ++v)
      out[v] = to_float(loaded.v[v]);
  }
}

//! Stores Vec consecutive channels (from c) of row `row`: one vector store when Vec > 1 (same
//! alignment rule as conv1d_load).
template <int Vec, class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void conv1d_store(T* base, std::int64_t row, int channels, int c,
                                                     const float (&in)[Vec]) {
  T* p = base + row * channels + c;
  if constexpr (Vec == 1) {
    p[0] = from_float<T>(in[0]);
  } else {
    struct alignas(sizeof(T) * Vec) pack {
      T v[Vec];
    };
    pack out;
    DCPP_UNROLL
    for (int v = 0; v < Vec; ++v)
      out.v[v] = from_float<T>(in[v]);
#if defined(__CUDA_ARCH__)
    static_assert(sizeof(pack) == 8 || sizeof(pack) == 16, "8- or 16-byte vectors");
    std::uint32_t w[sizeof(pack) / 4];
    std::memcpy(w, &out, sizeof(pack));
    if constexpr (sizeof(pack) == 16)
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(w[0]), "r"(w[1]),
                   "r"(w[2]), "r"(w[3])
                   : "memory");
    else
      asm volatile("st.global.v2.u32 [%0], {%1, %2};\n" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
#else
    std::memcpy(p, &out, sizeof(pack));
#endif
  }
}

//! x at local row u of segment s (u may precede the segment: halo row or zero before position 0).
template <int W, int Vec, class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void conv1d_x_at(const conv1d_params<T>& p, int s,
                                                    std::int64_t u, int c, float (&out)[Vec]) {
  const std::int64_t begin = p.seg.begin[s];
  if (u >= begin) {
    conv1d_load<Vec>(p.x, u, p.channels, c, out);
    return;
  }
  const std::int64_t d = begin - u; // 1 .. W-1 tokens before the segment
  const std::int64_t halo = p.seg.halo != nullptr ? p.seg.halo[s] : -1;
  if (conv1d_position(p.seg, s) - d < 0 || halo < 0 || p.halo_x == nullptr) {
    DCPP_UNROLL
    for (int v = 0; v < Vec; ++v)
      out[v] = 0.0f;
    return;
  }
  conv1d_load<Vec>(p.halo_x, halo + (W - 1) - d, p.channels, c, out);
}

DCPP_HOST_DEVICE DCPP_FORCE_INLINE float conv1d_sigmoid(float z) {
#if defined(__CUDA_ARCH__)
  return __fdividef(1.0f, 1.0f + __expf(-z)); // IEEE division would call a spilling subroutine
#else
  return 1.0f / (1.0f + std::exp(-z));
#endif
}

//! Pre-activation b + sum_k w x[t-k] at local row t of segment s.
template <int W, int Vec, class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void conv1d_pre(const conv1d_params<T>& p, int s, std::int64_t t,
                                                   int c, const float (&w)[Vec][W],
                                                   const float (&b)[Vec], float (&pre)[Vec]) {
  DCPP_UNROLL
  for (int v = 0; v < Vec; ++v)
    pre[v] = b[v];
  DCPP_UNROLL
  for (int k = 0; k < W; ++k) {
    float xv[Vec];
    conv1d_x_at<W, Vec>(p, s, t - k, c, xv);
    DCPP_UNROLL
    for (int v = 0; v < Vec; ++v)
      pre[v] += w[v][k] * xv[v];
  }
}

//! g = dy * d act / d pre at local row t of segment s; 0 on padding positions.
template <int W, int Vec, class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void
conv1d_grad_pre(const conv1d_params<T>& p, int s, std::int64_t t, int c, const float (&w)[Vec][W],
                const float (&b)[Vec], float (&g)[Vec]) {
  const std::int64_t position = conv1d_position(p.seg, s) + (t - p.seg.begin[s]);
  if (position >= conv1d_real_length(p.seg, s)) {
    DCPP_UNROLL
    for (int v = 0; v < Vec; ++v)
      g[v] = 0.0f;
    return;
  }
  float dy[Vec];
  conv1d_load<Vec>(p.dy, t, p.channels, c, dy);
  if (!p.silu) {
    DCPP_UNROLL
    for (int v = 0; v < Vec; ++v)
      g[v] = dy[v];
    return;
  }
  float pre[Vec];
  conv1d_pre<W, Vec>(p, s, t, c, w, b, pre);
  DCPP_UNROLL
  for (int v = 0; v < Vec; ++v) {
    const float sig = conv1d_sigmoid(pre[v]);
    g[v] = dy[v] * sig * (1.0f + pre[v] * (1.0f - sig));
  }
}

template <int W, int Vec, class T>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE void conv1d_load_weights(const conv1d_params<T>& p, int c,
                                                            float (&w)[Vec][W], float (&b)[Vec]) {
  DCPP_UNROLL
  for (int v = 0; v < Vec; ++v) {
    DCPP_UNROLL
    for (int k = 0; k < W; ++k)
      w[v][k] = to_float(p.weight[static_cast<std::int64_t>(c + v) * W + k]);
    b[v] = p.bias != nullptr ? to_float(p.bias[c + v]) : 0.0f;
  }
}

} // namespace detail

//! Forward. Grid (ceil(tokens / 64), ceil(channels / (32 * Vec))), block (32, 4). Each thread
//! slides a W-token window over its 32 tokens, re-primed at each segment start.
template <int W, int Vec, class Ctx, class T>
DCPP_HOST_DEVICE void conv1d_forward_body(Ctx& ctx, const conv1d_params<T>& p) {
  static_assert(W >= 2 && W <= 4, "width 2..4");
  using tile = conv1d_tile;
  const simt::index3 ti = ctx.thread_index(), bi = ctx.block_index();
  const int c = static_cast<int>((bi.y * tile::channel_threads + ti.x) * Vec);
  if (c >= p.channels)
    return; // no barrier in this kernel
  float w[Vec][W], b[Vec];
  detail::conv1d_load_weights<W, Vec>(p, c, w, b);
  std::int64_t t =
      (static_cast<std::int64_t>(bi.x) * tile::token_groups + ti.y) * tile::tokens_per_thread;
  const std::int64_t end =
      t + tile::tokens_per_thread < p.tokens ? t + tile::tokens_per_thread : p.tokens;
  int s = detail::conv1d_find_segment(p.seg, t);
  while (t < end) {
    if (s < 0) { // outside every segment: zeros
      const float zero[Vec] = {};
      detail::conv1d_store<Vec>(p.y, t, p.channels, c, zero);
      ++t;
      s = detail::conv1d_find_segment(p.seg, t);
      continue;
    }
    const std::int64_t seg_end = p.seg.begin[s + 1];
    const std::int64_t first_position = detail::conv1d_position(p.seg, s) - p.seg.begin[s];
    const std::int64_t real = detail::conv1d_real_length(p.seg, s);
    float window[W][Vec]; // window[k] = x[t - k]
    DCPP_UNROLL
    for (int k = 1; k < W; ++k)
      detail::conv1d_x_at<W, Vec>(p, s, t - k, c, window[k]);
    for (; t < end && t < seg_end; ++t) {
      detail::conv1d_load<Vec>(p.x, t, p.channels, c, window[0]);
      const bool is_real = first_position + t < real;
      float out[Vec];
      DCPP_UNROLL
      for (int v = 0; v < Vec; ++v) {
        float acc = b[v];
        DCPP_UNROLL
        for (int k = 0; k < W; ++k)
          acc += w[v][k] * window[k][v];
        if (p.silu)
          acc *= detail::conv1d_sigmoid(acc);
        out[v] = is_real ? acc : 0.0f;
      }
      detail::conv1d_store<Vec>(p.y, t, p.channels, c, out);
      DCPP_UNROLL
      for (int k = W - 1; k > 0; --k)
        DCPP_UNROLL
      for (int v = 0; v < Vec; ++v)
        window[k][v] = window[k - 1][v];
    }
    s = t < p.tokens ? detail::conv1d_find_segment(p.seg, t) : -1;
  }
}

//! Backward, pass 1. Same grid and block as the forward, `conv1d_backward_shared_bytes` of
//! shared memory. Writes dx (the in-segment taps, plus `incoming`: the taps into the next chunk
//! of a context-parallel sample, computed by that chunk's owner with `conv1d_halo_grad_body` and
//! sent back) rounded once, and the block's dw/db partial sums to `partial[block.x]`.
template <int W, int Vec, class Ctx, class T>
DCPP_HOST_DEVICE void conv1d_backward_body(Ctx& ctx, const conv1d_params<T>& p) {
  static_assert(W >= 2 && W <= 4, "width 2..4");
  using tile = conv1d_tile;
  const simt::index3 ti = ctx.thread_index(), bi = ctx.block_index();
  const int c = static_cast<int>((bi.y * tile::channel_threads + ti.x) * Vec);
  const bool active = c < p.channels;
  float* shared =
      ctx.template shared_array<float>(tile::token_groups * tile::channel_threads * Vec * (W + 1));
  float dw[Vec][W] = {}, db[Vec] = {};
  if (active) {
    float w[Vec][W], b[Vec];
    detail::conv1d_load_weights<W, Vec>(p, c, w, b);
    std::int64_t t =
        (static_cast<std::int64_t>(bi.x) * tile::token_groups + ti.y) * tile::tokens_per_thread;
    const std::int64_t end =
        t + tile::tokens_per_thread < p.tokens ? t + tile::tokens_per_thread : p.tokens;
    // The incoming taps (rows ascending): found once for the run, then a cursor.
    std::int64_t in = 0;
    if (p.incoming_count > 0) {
      std::int64_t hi = p.incoming_count;
      while (in < hi) {
        const std::int64_t mid = (in + hi) / 2;
        if (p.incoming_rows[mid] < t)
          in = mid + 1;
        else
          hi = mid;
      }
    }
    int s = detail::conv1d_find_segment(p.seg, t);
    while (t < end) {
      if (s < 0) { // outside every segment: zero gradient
        const float zero[Vec] = {};
        detail::conv1d_store<Vec>(p.dx, t, p.channels, c, zero);
        ++t;
        s = detail::conv1d_find_segment(p.seg, t);
        continue;
      }
      const std::int64_t seg_end = p.seg.begin[s + 1];
      const std::int64_t first_position = detail::conv1d_position(p.seg, s) - p.seg.begin[s];
      const std::int64_t real = detail::conv1d_real_length(p.seg, s);
      // Sliding windows, so that each token's x and dy are read once and its pre-activation
      // gradient g computed once: xs[i] = x[t - (W-1) + i] (i < 2W-1; halo or zeros before the
      // segment, zeros past it), gs[k] = g[t + k] (zero past the segment or on padding).
      float xs[2 * W - 1][Vec], gs[W][Vec];
      DCPP_UNROLL
      for (int i = 0; i < 2 * W - 1; ++i) {
        const std::int64_t u = t - (W - 1) + i;
        if (u < seg_end) {
          detail::conv1d_x_at<W, Vec>(p, s, u, c, xs[i]);
        } else {
          DCPP_UNROLL
          for (int v = 0; v < Vec; ++v)
            xs[i][v] = 0.0f;
        }
      }
      // g at row u from the window entries x[u - j] = xs[base - j]
      const auto grad = [&](std::int64_t u, int base, float(&g)[Vec]) {
        if (u >= seg_end || first_position + u >= real) {
          DCPP_UNROLL
          for (int v = 0; v < Vec; ++v)
            g[v] = 0.0f;
          return;
        }
        detail::conv1d_load<Vec>(p.dy, u, p.channels, c, g);
        if (!p.silu)
          return;
        DCPP_UNROLL
        for (int v = 0; v < Vec; ++v) {
          float pre = b[v];
          DCPP_UNROLL
          for (int j = 0; j < W; ++j)
            pre += w[v][j] * xs[base - j][v];
          const float sig = detail::conv1d_sigmoid(pre);
          g[v] *= sig * (1.0f + pre * (1.0f - sig));
        }
      };
      DCPP_UNROLL
      for (int k = 0; k < W; ++k)
        grad(t + k, W - 1 + k, gs[k]);
      for (; t < end && t < seg_end; ++t) {
        // dx[t] = sum_k w[k] g[t + k] over the taps inside the segment (gs is zero past it)
        float dx[Vec] = {};
        DCPP_UNROLL
        for (int k = 0; k < W; ++k)
          DCPP_UNROLL
        for (int v = 0; v < Vec; ++v)
          dx[v] += w[v][k] * gs[k][v];
        // the taps into the next chunk, computed by its owner
        while (in < p.incoming_count && p.incoming_rows[in] < t)
          ++in;
        if (in < p.incoming_count && p.incoming_rows[in] == t) {
          DCPP_UNROLL
          for (int v = 0; v < Vec; ++v)
            dx[v] += p.incoming[in * p.channels + c + v];
        }
        detail::conv1d_store<Vec>(p.dx, t, p.channels, c, dx);
        // dw[k] += g[t] x[t - k], db += g[t], over real rows only: a padding row's g is 0, but
        // 0 x NaN is NaN, and a NaN in the sample's last real x would reach dw through it
        if (first_position + t < real) {
          DCPP_UNROLL
          for (int v = 0; v < Vec; ++v) {
            DCPP_UNROLL
            for (int k = 0; k < W; ++k)
              dw[v][k] += gs[0][v] * xs[W - 1 - k][v];
            db[v] += gs[0][v];
          }
        }
        // slide to t + 1: x[t + W] enters the x window, g[t + W] the g window
        DCPP_UNROLL
        for (int i = 0; i < 2 * W - 2; ++i)
          DCPP_UNROLL
        for (int v = 0; v < Vec; ++v)
          xs[i][v] = xs[i + 1][v];
        if (t + W < seg_end) {
          detail::conv1d_load<Vec>(p.x, t + W, p.channels, c, xs[2 * W - 2]);
        } else {
          DCPP_UNROLL
          for (int v = 0; v < Vec; ++v)
            xs[2 * W - 2][v] = 0.0f;
        }
        DCPP_UNROLL
        for (int k = 0; k < W - 1; ++k)
          DCPP_UNROLL
        for (int v = 0; v < Vec; ++v)
          gs[k][v] = gs[k + 1][v];
        grad(t + W, 2 * W - 2, gs[W - 1]);
      }
      s = t < p.tokens ? detail::conv1d_find_segment(p.seg, t) : -1;
    }
  }
  // Block reduction of dw/db over the 4 token groups, in a fixed order (deterministic).
  const unsigned slot = (ti.y * tile::channel_threads + ti.x) * Vec * (W + 1);
  DCPP_UNROLL
  for (int v = 0; v < Vec; ++v) {
    DCPP_UNROLL
    for (int k = 0; k < W; ++k)
      shared[slot + v * (W + 1) + k] = dw[v][k];
    shared[slot + v * (W + 1) + W] = db[v];
  }
  ctx.sync_block();
  if (ti.y == 0 && active) {
    DCPP_UNROLL
    for (int v = 0; v < Vec; ++v) {
      DCPP_UNROLL
      for (int k = 0; k <= W; ++k) {
        float sum = 0.0f;
        DCPP_UNROLL
        for (unsigned group = 0; group < tile::token_groups; ++group)
          sum += shared[(group * tile::channel_threads + ti.x) * Vec * (W + 1) + v * (W + 1) + k];
        p.partial[(static_cast<std::int64_t>(bi.x) * p.channels + c + v) * (W + 1) + k] = sum;
      }
    }
  }
}

//! Backward, pass 2: dw and db from the per-block partials, summed over blocks in order. Grid
//! ceil(channels * (W + 1) / 256), block 256.
template <int W, class Ctx, class T>
DCPP_HOST_DEVICE void conv1d_reduce_body(Ctx& ctx, const conv1d_params<T>& p,
                                         std::int64_t token_blocks) {
  const std::int64_t i = static_cast<std::int64_t>(ctx.block_index().x) *
                             static_cast<std::int64_t>(ctx.block_dim().x) +
                         ctx.thread_index().x;
  if (i >= static_cast<std::int64_t>(p.channels) * (W + 1))
    return;
  const std::int64_t c = i / (W + 1), k = i % (W + 1);
  float sum = 0.0f;
  for (std::int64_t blk = 0; blk < token_blocks; ++blk)
    sum += p.partial[(blk * p.channels + c) * (W + 1) + k];
  if (k < W)
    p.dweight[c * W + k] = sum;
  else if (p.dbias != nullptr)
    p.dbias[c] = sum;
}

//! Gradients of the halo rows (the W-1 tokens before each chunk that does not start its sample,
//! held by other ranks): halo row for position begin-d gets sum_{k >= d} w[k] g[begin - d + k].
//! Runs before the exchange that sends them to their owners. Grid (segments, ceil(channels /
//! (128 * Vec))), block 128; segments without halo rows return at once.
template <int W, int Vec, class Ctx, class T>
DCPP_HOST_DEVICE void conv1d_halo_grad_body(Ctx& ctx, const conv1d_params<T>& p) {
  const int s = static_cast<int>(ctx.block_index().x);
  const int c =
      static_cast<int>((ctx.block_index().y * ctx.block_dim().x + ctx.thread_index().x) * Vec);
  const std::int64_t halo = p.seg.halo != nullptr ? p.seg.halo[s] : -1;
  if (c >= p.channels || halo < 0)
    return;
  float w[Vec][W], b[Vec];
  detail::conv1d_load_weights<W, Vec>(p, c, w, b);
  const std::int64_t seg_begin = p.seg.begin[s], seg_end = p.seg.begin[s + 1];
  DCPP_UNROLL
  for (int d = 1; d < W; ++d) {
    float acc[Vec] = {};
    DCPP_UNROLL
    for (int k = 0; k < W; ++k) {
      if (k < d)
        continue;
      if (seg_begin - d + k >= seg_end)
        break;
      float g[Vec];
      detail::conv1d_grad_pre<W, Vec>(p, s, seg_begin - d + k, c, w, b, g);
      DCPP_UNROLL
      for (int v = 0; v < Vec; ++v)
        acc[v] += w[v][k] * g[v];
    }
    DCPP_UNROLL
    for (int v = 0; v < Vec; ++v)
      p.halo_dx[(halo + (W - 1) - d) * p.channels + c + v] = acc[v];
  }
}

//! Row gather-sum: out[s, j] = (accumulate ? out[s, j] : 0) + sum over t in
//! [offsets[s], offsets[s+1]) of in[sources[t], j], in t order (deterministic, no atomics). Sums
//! the halo gradients of one token received from several ranks before the conv backward; the GPU
//! trainer also sums its embedding gradients with it. One thread per (s, j), 1-D grid.
template <class Ctx>
DCPP_HOST_DEVICE void row_gather_sum_body(Ctx& ctx, const float* in, const std::int64_t* offsets,
                                          const std::int64_t* sources, float* out,
                                          std::int64_t segments, int width, bool accumulate) {
  const std::int64_t i =
      static_cast<std::int64_t>(ctx.block_index().x) * ctx.block_dim().x + ctx.thread_index().x;
  if (i >= segments * width)
    return;
  const std::int64_t s = i / width, j = i % width;
  float sum = accumulate ? out[i] : 0.0f;
  for (std::int64_t t = offsets[s]; t < offsets[s + 1]; ++t)
    sum += in[sources[t] * width + j];
  out[i] = sum;
}

} // namespace dcpp::kernels
