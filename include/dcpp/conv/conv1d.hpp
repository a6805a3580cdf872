// Causal depthwise conv1d over packed sequences on the host side: segment layouts (plain varlen,
// zigzag context parallel, shape padding), the CPU launches of the kernels' own source through
// the host launcher, and the CP halo exchange (forward: the W-1 tokens before each chunk;
// backward: their gradients back to the owners) through a communicator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/conv/causal_conv1d.hpp" // kernels/dcpp/conv/causal_conv1d.hpp: the kernel bodies
#include "dcpp/core/math.hpp"
#include "dcpp/core/zigzag.hpp"
#include "dcpp/error.hpp"
#include "dcpp/route/fields.hpp"
#include "dcpp/simt/host_launcher.hpp"

namespace dcpp {

//! Owning segment table of one buffer (see kernels::conv1d_segments).
struct conv1d_layout {
  std::int64_t tokens = 0; //!< rows of the buffer (padding included)
  std::vector<std::int32_t> begin{0};
  std::vector<std::int64_t> position, length, halo;
  std::int64_t halo_rows = 0;

  [[nodiscard]] int segments() const noexcept { return static_cast<int>(begin.size()) - 1; }
  [[nodiscard]] kernels::conv1d_segments view() const noexcept {
    return {begin.data(), position.data(), length.data(), halo.data(), segments()};
  }

  //! Whole sequences delimited by `cu_seqlens` (int32, starting at 0) in a buffer of `tokens`
  //! rows; rows past the last sequence are outside every segment.
  static conv1d_layout from_cu_seqlens(std::span<const std::int32_t> cu_seqlens,
                                       std::int64_t tokens) {
    if (cu_seqlens.empty() || cu_seqlens[0] != 0)
      throw error(status_code::invalid_length, "conv1d: cu_seqlens must start with 0");
    conv1d_layout l;
    l.tokens = tokens;
    for (std::size_t i = 1; i < cu_seqlens.size(); ++i) {
      if (cu_seqlens[i] < cu_seqlens[i - 1])
        throw error(status_code::invalid_length,
                    fmt::format("conv1d: cu_seqlens[{}] = {} is below cu_seqlens[{}] = {}", i,
                                cu_seqlens[i], i - 1, cu_seqlens[i - 1]));
      l.begin.push_back(cu_seqlens[i]);
      l.position.push_back(0);
      l.length.push_back(cu_seqlens[i] - cu_seqlens[i - 1]);
      l.halo.push_back(-1);
    }
    if (l.begin.back() > tokens)
      throw error(status_code::invalid_length,
                  fmt::format("conv1d: cu_seqlens ends at {}, past the {} tokens of the buffer",
                              l.begin.back(), tokens));
    return l;
  }

  //! One rank's THD buffer of a CP group (zigzag chunks r and 2cp-1-r of every sample). Chunks
  //! that follow each other in the sample (cp = 1, or the middle rank's two chunks) form one
  //! segment; every other chunk gets W-1 halo rows.
  static conv1d_layout from_thd(const thd_layout& t, int width) {
    conv1d_layout l;
    l.tokens = t.tokens();
    if (t.idle())
      return l;
    const std::int64_t cp = t.cp, r = t.rank_in_group;
    for (std::size_t i = 0; i + 1 < t.cu_seqlens_padded.size(); ++i) {
      const std::int64_t padded = t.cu_seqlens_padded[i + 1] - t.cu_seqlens_padded[i];
      const std::int64_t real = t.cu_seqlens[i + 1] - t.cu_seqlens[i];
      const std::int64_t chunk = zigzag_chunk_size(padded, cp);
      const std::int64_t base = t.cu_seqlens_padded[i] / cp;
      const std::int64_t first = zigzag_chunk_index(cp, r, 0),
                         second = zigzag_chunk_index(cp, r, 1);
      auto add = [&](std::int64_t local_begin, std::int64_t rows, std::int64_t chunk_index) {
        l.begin.push_back(static_cast<std::int32_t>(local_begin + rows));
        l.position.push_back(chunk_index * chunk);
        l.length.push_back(real);
        l.halo.push_back(chunk_index > 0 ? l.halo_rows : -1);
        if (chunk_index > 0)
          l.halo_rows += width - 1;
      };
      if (second == first + 1) {
        add(base, 2 * chunk, first);
      } else {
        add(base, chunk, first);
        add(base + chunk, chunk, second);
      }
    }
    return l;
  }
};

//! Shape padding: the token count rounded up to a multiple of `alignment` (at least one row),
//! so that kernels and captured graphs see few distinct shapes.
[[nodiscard]] inline std::int64_t aligned_tokens(std::int64_t tokens, std::int64_t alignment) {
  if (alignment < 1)
    throw error(status_code::invalid_option,
                fmt::format("conv1d: alignment = {} must be >= 1", alignment));
  return round_up<std::int64_t>(std::max<std::int64_t>(tokens, 1), alignment);
}

//! The layout of a buffer padded to `padded_tokens` rows: the padding forms its own segment
//! (all padding: zero output, no gradient), so no tap of a real token reads it.
[[nodiscard]] inline conv1d_layout pad_layout(conv1d_layout l, std::int64_t padded_tokens) {
  if (padded_tokens < l.tokens)
    throw error(status_code::invalid_option,
                fmt::format("conv1d: padded_tokens = {} is below the {} tokens of the buffer",
                            padded_tokens, l.tokens));
  if (l.begin.back() < padded_tokens) {
    l.begin.push_back(static_cast<std::int32_t>(padded_tokens));
    l.position.push_back(0);
    l.length.push_back(0);
    l.halo.push_back(-1);
  }
  l.tokens = padded_tokens;
  return l;
}

namespace detail {
template <int W, class T, class F>
void conv1d_dispatch_vec(const kernels::conv1d_params<T>& p, F&& run) {
  constexpr int vec = 4;
  if (p.channels % vec == 0)
    run(std::integral_constant<int, vec>{});
  else
    run(std::integral_constant<int, 1>{});
}

inline simt::launch_shape conv1d_shape(std::int64_t tokens, int channels, int vec,
                                       std::size_t shared) {
  return {{static_cast<unsigned>((tokens + kernels::conv1d_tile::tokens_per_block - 1) /
                                 kernels::conv1d_tile::tokens_per_block),
           static_cast<unsigned>((channels / vec + kernels::conv1d_tile::channel_threads - 1) /
                                 kernels::conv1d_tile::channel_threads),
           1},
          {kernels::conv1d_tile::channel_threads, kernels::conv1d_tile::token_groups, 1},
          shared};
}

template <class T>
status check_conv1d(const kernels::conv1d_params<T>& p, const conv1d_layout& l, bool backward) {
  auto fail = [](std::string m) {
    return status::failure(status_code::invalid_option, std::move(m));
  };
  if (p.channels < 1)
    return fail(fmt::format("conv1d: channels = {} must be >= 1", p.channels));
  if (p.tokens != l.tokens)
    return fail(
        fmt::format("conv1d: tokens = {} differs from the layout's {}", p.tokens, l.tokens));
  if (l.begin.back() > l.tokens)
    return fail(
        fmt::format("conv1d: segments end at {}, past the {} tokens", l.begin.back(), l.tokens));
  if (p.x == nullptr || p.weight == nullptr || (!backward && p.y == nullptr) ||
      (backward && (p.dy == nullptr || p.dx == nullptr || p.dweight == nullptr)))
    return fail("conv1d: a required buffer (x, weight, y or dy, dx, dweight) is null");
  if (l.halo_rows > 0 && p.halo_x == nullptr)
    return fail(fmt::format("conv1d: the layout has {} halo rows but halo_x is null", l.halo_rows));
  return status::success();
}
} // namespace detail

//! Forward on the CPU through the host launcher. `p.seg` is set from `layout`.
template <int W, class T>
void conv1d_forward_on_host(kernels::conv1d_params<T> p, const conv1d_layout& layout,
                            const simt::host_launch_options& options = {}) {
  p.seg = layout.view();
  throw_if_failed(detail::check_conv1d(p, layout, false));
  if (p.tokens == 0)
    return;
  detail::conv1d_dispatch_vec<W>(p, [&](auto vec) {
    simt::host_launch(
        detail::conv1d_shape(p.tokens, p.channels, vec, 0),
        [&p](simt::host_context& ctx) {
          kernels::conv1d_forward_body<W, decltype(vec)::value>(ctx, p);
        },
        options);
  });
}

//! The halo rows' gradients on the CPU (`p.halo_dx`, `layout.halo_rows` rows): with CP, run
//! this, send them to their owners (`collect_halo_gradients`), then the backward.
template <int W, class T>
void conv1d_halo_gradients_on_host(kernels::conv1d_params<T> p, const conv1d_layout& layout,
                                   const simt::host_launch_options& options = {}) {
  p.seg = layout.view();
  throw_if_failed(detail::check_conv1d(p, layout, true));
  if (layout.halo_rows == 0 || layout.segments() == 0)
    return;
  if (p.halo_dx == nullptr)
    throw error(
        status_code::invalid_option,
        fmt::format("conv1d: the layout has {} halo rows but halo_dx is null", layout.halo_rows));
  detail::conv1d_dispatch_vec<W>(p, [&](auto vec) {
    constexpr int v = decltype(vec)::value;
    simt::host_launch(
        simt::launch_shape{{static_cast<unsigned>(layout.segments()),
                            static_cast<unsigned>((p.channels / v + 127) / 128), 1},
                           {128, 1, 1},
                           0},
        [&p](simt::host_context& ctx) { kernels::conv1d_halo_grad_body<W, v>(ctx, p); }, options);
  });
}

//! Gradients other ranks computed for rows of this buffer, rows ascending and distinct.
struct conv1d_incoming_gradients {
  std::vector<std::int64_t> rows;
  std::vector<float> values; //!< [rows, channels]
};

//! Backward on the CPU: dx (in-segment taps plus `incoming`, rounded once) and dw/db through the
//! two passes (the workspace is allocated here).
template <int W, class T>
void conv1d_backward_on_host(kernels::conv1d_params<T> p, const conv1d_layout& layout,
                             const conv1d_incoming_gradients* incoming = nullptr,
                             const simt::host_launch_options& options = {}) {
  p.seg = layout.view();
  throw_if_failed(detail::check_conv1d(p, layout, true));
  if (incoming != nullptr && !incoming->rows.empty()) {
    p.incoming_rows = incoming->rows.data();
    p.incoming = incoming->values.data();
    p.incoming_count = static_cast<std::int64_t>(incoming->rows.size());
  }
  const std::int64_t blocks = (p.tokens + kernels::conv1d_tile::tokens_per_block - 1) /
                              kernels::conv1d_tile::tokens_per_block;
  std::vector<float> partial(static_cast<std::size_t>(std::max<std::int64_t>(blocks, 1)) *
                             static_cast<std::size_t>(p.channels) * (W + 1));
  p.partial = partial.data();
  if (p.tokens > 0)
    detail::conv1d_dispatch_vec<W>(p, [&](auto vec) {
      constexpr int v = decltype(vec)::value;
      simt::host_launch(
          detail::conv1d_shape(p.tokens, p.channels, v,
                               kernels::conv1d_backward_shared_bytes<W, v>()),
          [&p](simt::host_context& ctx) { kernels::conv1d_backward_body<W, v>(ctx, p); }, options);
    });
  const std::int64_t outputs = static_cast<std::int64_t>(p.channels) * (W + 1);
  simt::host_launch(
      simt::launch_shape{{static_cast<unsigned>((outputs + 255) / 256), 1, 1}, {256, 1, 1}, 0},
      [&p, blocks](simt::host_context& ctx) { kernels::conv1d_reduce_body<W>(ctx, p, blocks); },
      options);
}

namespace detail {
//! Calls `f(std::integral_constant<int, W>{})` for a runtime width 2..4 (the kernels' template).
template <class F>
void with_width(int width, F&& f) {
  switch (width) {
  case 2: return f(std::integral_constant<int, 2>{});
  case 3: return f(std::integral_constant<int, 3>{});
  case 4: return f(std::integral_constant<int, 4>{});
  default:
    throw error(status_code::invalid_option,
                fmt::format("conv1d: width = {} must be 2, 3 or 4", width));
  }
}
} // namespace detail

//! Runtime width (2..4) versions of the three host entry points.
template <class T>
void conv1d_forward_on_host(int width, const kernels::conv1d_params<T>& p,
                            const conv1d_layout& layout, const simt::host_launch_options& o = {}) {
  detail::with_width(width,
                     [&](auto w) { conv1d_forward_on_host<decltype(w)::value>(p, layout, o); });
}
template <class T>
void conv1d_halo_gradients_on_host(int width, const kernels::conv1d_params<T>& p,
                                   const conv1d_layout& layout,
                                   const simt::host_launch_options& o = {}) {
  detail::with_width(
      width, [&](auto w) { conv1d_halo_gradients_on_host<decltype(w)::value>(p, layout, o); });
}
template <class T>
void conv1d_backward_on_host(int width, const kernels::conv1d_params<T>& p,
                             const conv1d_layout& layout,
                             const conv1d_incoming_gradients* incoming = nullptr,
                             const simt::host_launch_options& o = {}) {
  detail::with_width(
      width, [&](auto w) { conv1d_backward_on_host<decltype(w)::value>(p, layout, incoming, o); });
}

//! Who holds which halo token of a CP group, for one rank: a pure function of the THD layout
//! (identical on every member) and the width.
struct conv1d_halo_plan {
  struct need {
    std::int64_t halo_row;  //!< row of this rank's halo buffer
    std::int32_t owner;     //!< group rank holding the token
    std::int64_t owner_row; //!< its row in the owner's buffer
  };
  std::int32_t cp = 1, rank = 0;
  std::vector<need> needs;                      //!< this rank's halo rows, in order
  std::vector<std::vector<std::int64_t>> sends; //!< [receiver]: my rows it needs, its order
  std::int64_t halo_rows = 0;

  static conv1d_halo_plan make(const thd_layout& t, int width) {
    conv1d_halo_plan plan;
    if (t.idle())
      return plan;
    plan.cp = t.cp;
    plan.rank = t.rank_in_group;
    plan.sends.resize(static_cast<std::size_t>(t.cp));
    for (std::int32_t q = 0; q < t.cp; ++q) {
      thd_layout other = t;
      other.rank_in_group = q;
      const std::vector<need> wanted = needs_of(other, width);
      if (q == t.rank_in_group) {
        plan.needs = wanted;
        plan.halo_rows = conv1d_layout::from_thd(other, width).halo_rows;
      } else {
        for (const need& n : wanted)
          if (n.owner == t.rank_in_group)
            plan.sends[static_cast<std::size_t>(q)].push_back(n.owner_row);
      }
    }
    return plan;
  }

private:
  static std::vector<need> needs_of(const thd_layout& t, int width) {
    std::vector<need> out;
    const conv1d_layout l = conv1d_layout::from_thd(t, width);
    const std::int64_t cp = t.cp;
    std::size_t segment = 0;
    for (std::size_t i = 0; i + 1 < t.cu_seqlens_padded.size(); ++i) {
      const std::int64_t padded = t.cu_seqlens_padded[i + 1] - t.cu_seqlens_padded[i];
      const std::int64_t chunk = zigzag_chunk_size(padded, cp);
      const std::int64_t base = t.cu_seqlens_padded[i] / cp;
      const std::size_t segments_here = zigzag_chunk_index(cp, t.rank_in_group, 1) ==
                                                zigzag_chunk_index(cp, t.rank_in_group, 0) + 1
                                            ? 1
                                            : 2;
      for (std::size_t k = 0; k < segments_here; ++k, ++segment) {
        const std::int64_t h = l.halo[segment];
        if (h < 0)
          continue;
        for (std::int64_t d = width - 1; d >= 1; --d) {
          const std::int64_t q = l.position[segment] - d;
          if (q < 0)
            continue; // before the sequence: zero, nobody sends it
          const std::int64_t j = q / chunk;
          const std::int64_t owner = j < cp ? j : 2 * cp - 1 - j;
          const std::int64_t row = base + (j < cp ? 0 : chunk) + q % chunk;
          out.push_back({h + (width - 1) - d, static_cast<std::int32_t>(owner), row});
        }
      }
    }
    return out;
  }
};

//! Forward halo exchange on the group communicator (collective over the group): returns this
//! rank's halo buffer `[plan.halo_rows, channels]`; rows before a sequence's start stay zero.
template <communicator C, class T>
requires(C::buffer_memory == memory_space::host)
    [[nodiscard]] std::vector<T> exchange_halo(C& group, const conv1d_halo_plan& plan,
                                               std::span<const T> x, int channels) {
  const auto n = static_cast<std::size_t>(group.size());
  const auto me = static_cast<std::int32_t>(group.rank());
  const auto row_bytes = static_cast<std::size_t>(channels);
  std::vector<T> halo(static_cast<std::size_t>(plan.halo_rows) * row_bytes, from_float<T>(0.0f));
  std::vector<std::int64_t> send_counts(n, 0), recv_counts(n, 0);
  std::vector<T> send;
  for (std::size_t q = 0; q < n; ++q)
    if (static_cast<std::int32_t>(q) != me && q < plan.sends.size())
      for (const std::int64_t row : plan.sends[q]) {
        send.insert(send.end(), x.begin() + row * channels, x.begin() + (row + 1) * channels);
        send_counts[q] += channels;
      }
  for (const auto& need : plan.needs)
    if (need.owner != me)
      recv_counts[static_cast<std::size_t>(need.owner)] += channels;
  std::int64_t total = 0;
  for (auto c : recv_counts)
    total += c;
  std::vector<T> received(static_cast<std::size_t>(total));
  group.all_to_all_v(std::span<const T>(send), std::span<const std::int64_t>(send_counts),
                     std::span<T>(received), std::span<const std::int64_t>(recv_counts));
  std::vector<std::int64_t> cursor(n, 0), start(n, 0);
  for (std::size_t q = 1; q < n; ++q)
    start[q] = start[q - 1] + recv_counts[q - 1];
  for (const auto& need : plan.needs) {
    T* dst = halo.data() + need.halo_row * channels;
    if (need.owner == me) {
      std::copy_n(x.begin() + need.owner_row * channels, channels, dst);
    } else {
      const auto o = static_cast<std::size_t>(need.owner);
      std::copy_n(received.begin() + start[o] + cursor[o], channels, dst);
      cursor[o] += channels;
    }
  }
  return halo;
}

//! Backward halo exchange (collective over the group): every rank's `halo_dx` rows go to the
//! owners of those tokens; each owner gets them summed per row (own halo rows first, then
//! senders in rank order: deterministic), rows ascending, for `conv1d_backward_on_host`.
template <communicator C>
requires(C::buffer_memory == memory_space::host) [[nodiscard]] conv1d_incoming_gradients
    collect_halo_gradients(C& group, const conv1d_halo_plan& plan, std::span<const float> halo_dx,
                           int channels) {
  const auto n = static_cast<std::size_t>(group.size());
  const auto me = static_cast<std::int32_t>(group.rank());
  const auto width = static_cast<std::size_t>(channels);
  std::vector<std::int64_t> send_counts(n, 0), recv_counts(n, 0);
  std::vector<float> send;
  for (std::size_t owner = 0; owner < n; ++owner)
    for (const auto& need : plan.needs)
      if (need.owner == static_cast<std::int32_t>(owner) && need.owner != me) {
        send.insert(send.end(), halo_dx.begin() + need.halo_row * channels,
                    halo_dx.begin() + (need.halo_row + 1) * channels);
        send_counts[owner] += channels;
      }
  for (std::size_t q = 0; q < n; ++q)
    if (static_cast<std::int32_t>(q) != me && q < plan.sends.size())
      recv_counts[q] = static_cast<std::int64_t>(plan.sends[q].size()) * channels;
  std::int64_t total = 0;
  for (auto c : recv_counts)
    total += c;
  std::vector<float> received(static_cast<std::size_t>(total));
  group.all_to_all_v(std::span<const float>(send), std::span<const std::int64_t>(send_counts),
                     std::span<float>(received), std::span<const std::int64_t>(recv_counts));
  // (row, contribution) in a fixed order, then a stable sort by row and a sum per row.
  std::vector<std::pair<std::int64_t, const float*>> parts;
  for (const auto& need : plan.needs)
    if (need.owner == me)
      parts.emplace_back(need.owner_row, halo_dx.data() + need.halo_row * channels);
  std::size_t at = 0;
  for (std::size_t q = 0; q < n; ++q)
    if (static_cast<std::int32_t>(q) != me && q < plan.sends.size())
      for (const std::int64_t row : plan.sends[q]) {
        parts.emplace_back(row, received.data() + at);
        at += width;
      }
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  conv1d_incoming_gradients out;
  for (const auto& [row, values] : parts) {
    if (out.rows.empty() || out.rows.back() != row) {
      out.rows.push_back(row);
      out.values.resize(out.values.size() + width, 0.0f);
    }
    float* sum = out.values.data() + (out.rows.size() - 1) * width;
    for (std::size_t c = 0; c < width; ++c)
      sum[c] += values[c];
  }
  return out;
}

} // namespace dcpp
