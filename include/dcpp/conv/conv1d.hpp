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
#include "dcpp/core/math.hpp"
#include "dcpp/core/zigzag.hpp"
#include "dcpp/error.hpp"
#include "dcpp/kernels/conv/causal_conv1d.hpp" // kernels/dcpp/kernels/conv/causal_conv1d.hpp: the kernel bodies
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
  constexpr int vec = kernels::conv1d_vector<T>; // 16-byte vectors, as on the device
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
  // The kernels read the W-1 neighbouring tokens of every token (before it forward, after it
  // backward) while other threads write the output: an output overlapping an input races on a GPU
  // (the host launcher's one-at-a-time threads would hide it), so it is refused here.
  const auto bytes =
      static_cast<std::uint64_t>(p.tokens) * static_cast<std::uint64_t>(p.channels) * sizeof(T);
  const auto overlap = [bytes](const void* a, const void* b) {
    return bytes_overlap(a, bytes, b, bytes);
  };
  if (!backward && overlap(p.y, p.x))
    return fail("conv1d: y overlaps x; the forward reads neighbouring tokens of x while writing y, "
                "so it cannot run in place");
  if (backward && (overlap(p.dx, p.dy) || overlap(p.dx, p.x)))
    return fail(fmt::format("conv1d: dx overlaps {}; the backward reads neighbouring tokens of x "
                            "and dy while writing dx, so it cannot run in place",
                            overlap(p.dx, p.dy) ? "dy" : "x"));
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

//! The two halo exchanges of one rank as row maps and counts, a pure function of the plan, so
//! that any communicator and any memory can run them: pack rows with a gather, one all_to_all_v
//! (the rank's own rows included, sent to itself), unpack with a gather (forward) or a gather-sum
//! (backward). `exchange_halo` / `collect_halo_gradients` below run them on host memory; the
//! device exchange (dcpp/conv/conv1d_cuda.hpp) runs the same routes with kernels and NCCL.
//! Counts are in rows; `elements(counts, channels)` gives all_to_all_v's element counts.
struct conv1d_halo_routes {
  std::int32_t cp = 1, rank = 0;
  std::int64_t halo_rows = 0;
  // forward: rows of x packed in receiver order; received rows land in sender order
  std::vector<std::int64_t> send_rows, send_counts, recv_counts;
  std::vector<std::int64_t> halo_sources; //!< [halo_rows]: received row, or -1 (zero row)
  // backward: rows of halo_dx packed in owner order; received rows in sender order
  std::vector<std::int64_t> grad_send_rows, grad_send_counts, grad_recv_counts;
  std::vector<std::int64_t> incoming_rows;    //!< distinct rows of this buffer, ascending
  std::vector<std::int64_t> incoming_offsets; //!< [incoming rows + 1] into incoming_sources
  //! received gradient rows summed into each incoming row: the rank's own halo rows first, then
  //! the senders in rank order (deterministic)
  std::vector<std::int64_t> incoming_sources;

  [[nodiscard]] std::int64_t received_rows() const noexcept {
    return detail::total_count(recv_counts);
  }
  [[nodiscard]] std::int64_t received_gradient_rows() const noexcept {
    return detail::total_count(grad_recv_counts);
  }
  [[nodiscard]] static std::vector<std::int64_t> elements(const std::vector<std::int64_t>& rows,
                                                          int channels) {
    std::vector<std::int64_t> out(rows);
    for (auto& r : out)
      r *= channels;
    return out;
  }

  static conv1d_halo_routes make(const conv1d_halo_plan& plan) {
    conv1d_halo_routes r;
    r.cp = plan.cp, r.rank = plan.rank, r.halo_rows = plan.halo_rows;
    const auto n = static_cast<std::size_t>(plan.cp);
    const auto me = static_cast<std::size_t>(plan.rank);
    auto sends_to = [&](std::size_t q) -> const std::vector<std::int64_t>& {
      static const std::vector<std::int64_t> none;
      return q < plan.sends.size() ? plan.sends[q] : none;
    };
    r.send_counts.assign(n, 0), r.recv_counts.assign(n, 0);
    r.grad_send_counts.assign(n, 0), r.grad_recv_counts.assign(n, 0);
    for (std::size_t q = 0; q < n; ++q) {
      if (q == me) {
        for (const auto& need : plan.needs)
          if (static_cast<std::size_t>(need.owner) == me)
            r.send_rows.push_back(need.owner_row), ++r.send_counts[q];
      } else {
        for (const std::int64_t row : sends_to(q))
          r.send_rows.push_back(row), ++r.send_counts[q];
      }
      for (const auto& need : plan.needs)
        if (static_cast<std::size_t>(need.owner) == q)
          r.grad_send_rows.push_back(need.halo_row), ++r.grad_send_counts[q];
    }
    for (const auto& need : plan.needs)
      ++r.recv_counts[static_cast<std::size_t>(need.owner)];
    for (std::size_t q = 0; q < n; ++q)
      r.grad_recv_counts[q] =
          q == me ? r.recv_counts[me] : static_cast<std::int64_t>(sends_to(q).size());
    // forward: halo row <- received row (sender blocks in rank order, the plan's order inside)
    const auto first = [](const std::vector<std::int64_t>& counts) {
      std::vector<std::int64_t> at(counts.size(), 0);
      for (std::size_t q = 1; q < counts.size(); ++q)
        at[q] = at[q - 1] + counts[q - 1];
      return at;
    };
    r.halo_sources.assign(static_cast<std::size_t>(plan.halo_rows), -1);
    auto cursor = first(r.recv_counts);
    for (const auto& need : plan.needs)
      r.halo_sources[static_cast<std::size_t>(need.halo_row)] =
          cursor[static_cast<std::size_t>(need.owner)]++;
    // backward: (own row, received row), own contributions first, then senders in rank order;
    // a stable sort by row keeps that order inside each row
    std::vector<std::pair<std::int64_t, std::int64_t>> parts;
    const auto grad_first = first(r.grad_recv_counts);
    std::int64_t at = n > 0 ? grad_first[me] : 0;
    for (const auto& need : plan.needs)
      if (static_cast<std::size_t>(need.owner) == me)
        parts.emplace_back(need.owner_row, at++);
    for (std::size_t q = 0; q < n; ++q) {
      if (q == me)
        continue;
      at = grad_first[q];
      for (const std::int64_t row : sends_to(q))
        parts.emplace_back(row, at++);
    }
    std::stable_sort(parts.begin(), parts.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    r.incoming_offsets.push_back(0);
    for (const auto& [row, source] : parts) {
      if (r.incoming_rows.empty() || r.incoming_rows.back() != row) {
        r.incoming_rows.push_back(row);
        r.incoming_offsets.push_back(r.incoming_offsets.back());
      }
      r.incoming_sources.push_back(source);
      ++r.incoming_offsets.back();
    }
    return r;
  }
};

namespace detail {
inline void check_routes_group(const char* call, const conv1d_halo_routes& r, int group_rank,
                               int group_size) {
  if (r.cp != group_size || r.rank != group_rank)
    throw error(status_code::invalid_option,
                fmt::format("{}: the halo plan is for rank {} of a group of {}, the communicator "
                            "is rank {} of {}",
                            call, r.rank, r.cp, group_rank, group_size));
}
} // namespace detail

//! Forward halo exchange on the group communicator (collective over the group): returns this
//! rank's halo buffer `[plan.halo_rows, channels]`; rows before a sequence's start stay zero.
template <communicator C, class T>
requires(C::buffer_memory == memory_space::host)
    [[nodiscard]] std::vector<T> exchange_halo(C& group, const conv1d_halo_plan& plan,
                                               std::span<const T> x, int channels) {
  const auto r = conv1d_halo_routes::make(plan);
  detail::check_routes_group("exchange_halo", r, group.rank(), group.size());
  const auto width = static_cast<std::size_t>(channels);
  std::vector<T> send(r.send_rows.size() * width);
  for (std::size_t i = 0; i < r.send_rows.size(); ++i)
    std::copy_n(x.begin() + r.send_rows[i] * channels, channels, send.begin() + i * width);
  std::vector<T> received(static_cast<std::size_t>(r.received_rows()) * width);
  const auto send_counts = conv1d_halo_routes::elements(r.send_counts, channels);
  const auto recv_counts = conv1d_halo_routes::elements(r.recv_counts, channels);
  group.all_to_all_v(std::span<const T>(send), std::span<const std::int64_t>(send_counts),
                     std::span<T>(received), std::span<const std::int64_t>(recv_counts));
  std::vector<T> halo(static_cast<std::size_t>(plan.halo_rows) * width, from_float<T>(0.0f));
  for (std::size_t h = 0; h < r.halo_sources.size(); ++h)
    if (r.halo_sources[h] >= 0)
      std::copy_n(received.begin() + r.halo_sources[h] * channels, channels,
                  halo.begin() + h * width);
  return halo;
}

//! Backward halo exchange (collective over the group): every rank's `halo_dx` rows go to the
//! owners of those tokens; each owner gets them summed per row (own halo rows first, then
//! senders in rank order: deterministic), rows ascending, for `conv1d_backward_on_host`.
template <communicator C>
requires(C::buffer_memory == memory_space::host) [[nodiscard]] conv1d_incoming_gradients
    collect_halo_gradients(C& group, const conv1d_halo_plan& plan, std::span<const float> halo_dx,
                           int channels) {
  const auto r = conv1d_halo_routes::make(plan);
  detail::check_routes_group("collect_halo_gradients", r, group.rank(), group.size());
  const auto width = static_cast<std::size_t>(channels);
  std::vector<float> send(r.grad_send_rows.size() * width);
  for (std::size_t i = 0; i < r.grad_send_rows.size(); ++i)
    std::copy_n(halo_dx.begin() + r.grad_send_rows[i] * channels, channels,
                send.begin() + i * width);
  std::vector<float> received(static_cast<std::size_t>(r.received_gradient_rows()) * width);
  const auto send_counts = conv1d_halo_routes::elements(r.grad_send_counts, channels);
  const auto recv_counts = conv1d_halo_routes::elements(r.grad_recv_counts, channels);
  group.all_to_all_v(std::span<const float>(send), std::span<const std::int64_t>(send_counts),
                     std::span<float>(received), std::span<const std::int64_t>(recv_counts));
  conv1d_incoming_gradients out;
  out.rows = r.incoming_rows;
  out.values.assign(r.incoming_rows.size() * width, 0.0f);
  for (std::size_t s = 0; s < r.incoming_rows.size(); ++s) {
    float* sum = out.values.data() + s * width;
    for (auto t = r.incoming_offsets[s]; t < r.incoming_offsets[s + 1]; ++t)
      for (std::size_t c = 0; c < width; ++c)
        sum[c] +=
            received[static_cast<std::size_t>(r.incoming_sources[static_cast<std::size_t>(t)]) *
                         width +
                     c];
  }
  return out;
}

} // namespace dcpp
