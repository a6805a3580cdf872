// The head-parallel exchange (cp2hp / hp2cp) for layers that need whole sequences per head
// (Gated DeltaNet, Mamba): from each CP rank's zigzag chunks of every sequence with all heads, to
// whole sequences with a share of the heads on each rank, and back. One all-to-all-v over the
// CP group per call; host-memory communicators (local threads, MPI).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/core/zigzag.hpp"
#include "dcpp/error.hpp"
#include "dcpp/route/fields.hpp"

namespace dcpp {

//! The shape of one token's row: `heads` heads of `head_dim` elements, head-major
//! (`[heads][head_dim]`).
struct head_shape {
  std::int32_t heads = 0;
  std::int64_t head_dim = 0;
  friend bool operator==(const head_shape&, const head_shape&) = default;
};

//! How a tensor's heads are dealt over a CP group of `cp` ranks in the head-parallel layout:
//! * `heads` a multiple of `cp`: group rank r holds heads `[r x heads/cp, (r+1) x heads/cp)`;
//! * `cp` a multiple of `heads` (grouped-query attention with fewer key/value heads than
//!   ranks): group rank r holds head `r / (cp/heads)`, each head on `cp/heads` consecutive
//!   ranks: with query heads split the first way, the key/value head a rank's query heads use.
//! Any other pair is refused (`check`).
struct head_split {
  std::int32_t heads = 1;
  std::int32_t cp = 1;

  [[nodiscard]] static status check(std::int32_t heads, std::int32_t cp) {
    if (heads < 1 || cp < 1)
      return status::failure(status_code::invalid_option,
                             fmt::format("head-parallel exchange: heads = {} and cp = {} must "
                                         "both be at least 1",
                                         heads, cp));
    if (heads % cp != 0 && cp % heads != 0)
      return status::failure(
          status_code::invalid_option,
          fmt::format("head-parallel exchange: {} heads cannot be dealt over a CP group of {}: "
                      "the heads must be a multiple of cp (each rank holds heads / cp) or cp a "
                      "multiple of the heads (each head held by cp / heads ranks)",
                      heads, cp));
    return status::success();
  }
  //! Ranks holding each head (1 unless heads < cp).
  [[nodiscard]] std::int32_t replicas() const noexcept { return heads >= cp ? 1 : cp / heads; }
  //! Heads group rank r holds, from `first(r)`.
  [[nodiscard]] std::int32_t count() const noexcept { return heads >= cp ? heads / cp : 1; }
  [[nodiscard]] std::int32_t first(std::int32_t r) const noexcept {
    return heads >= cp ? r * (heads / cp) : r / (cp / heads);
  }
  //! Whether group rank r is the lowest rank holding its heads.
  [[nodiscard]] bool first_holder(std::int32_t r) const noexcept { return r % replicas() == 0; }
};

//! What `hp2cp` does with a head that several ranks hold (`head_split::replicas() > 1`): take
//! the lowest holder's values (activations, which the holders share), or add every holder's
//! (gradients of a shared key/value head), in group-rank order.
enum class replica_merge : std::uint8_t { take_first, sum };

//! The largest element count of a buffer the exchange takes (tokens x heads x head_dim, either
//! layout): 2^62, so that sizes, offsets and byte counts stay exact in 64 bits.
inline constexpr std::int64_t max_exchange_elements = std::int64_t{1} << 62;

namespace detail {
//! tokens x heads x head_dim, or an error naming them when it passes `max_exchange_elements`
//! (or a factor is negative).
[[nodiscard]] inline std::int64_t exchange_elements(std::int64_t tokens, std::int64_t heads,
                                                    std::int64_t head_dim) {
  std::int64_t n = 0;
  if (tokens < 0 || heads < 0 || head_dim < 0 || __builtin_mul_overflow(tokens, heads, &n) ||
      __builtin_mul_overflow(n, head_dim, &n) || n > max_exchange_elements)
    throw error(status_code::invalid_option,
                fmt::format("head-parallel exchange: {} tokens x {} heads x head_dim {} is not "
                            "a buffer size from 0 to max_exchange_elements = {}",
                            tokens, heads, head_dim, max_exchange_elements));
  return n;
}
} // namespace detail

//! Elements of this rank's zigzag buffer of `layout` (all heads) and of its head-parallel buffer
//! (whole padded sequences, `head_split::count()` heads). 0 for an idle rank. A size past
//! `max_exchange_elements` is an error (dcpp::error), not a wrapped number.
[[nodiscard]] inline std::int64_t cp_elements(const thd_layout& layout, head_shape shape) {
  return detail::exchange_elements(layout.tokens(), shape.heads, shape.head_dim);
}
[[nodiscard]] inline std::int64_t hp_elements(const thd_layout& layout, head_shape shape) {
  if (layout.idle())
    return 0;
  const head_split split{shape.heads, layout.cp};
  return detail::exchange_elements(layout.cu_seqlens_padded.back(), split.count(), shape.head_dim);
}

namespace detail {

//! The local checks of an exchange: the layout's geometry, the split and both buffer sizes.
[[nodiscard]] inline status head_exchange_status(const char* call, const thd_layout& l,
                                                 head_shape shape, std::size_t cp_size,
                                                 std::size_t hp_size) {
  const auto fail = [&](std::string m) {
    return status::failure(status_code::invalid_option, fmt::format("{}: {}", call, m));
  };
  if (shape.head_dim < 1)
    return fail(fmt::format("head_dim = {} must be at least 1", shape.head_dim));
  if (l.cp < 1 || l.rank_in_group < 0 || l.rank_in_group >= l.cp)
    return fail(fmt::format("the layout's group rank {} is outside its group of {}",
                            l.rank_in_group, l.cp));
  if (status s = head_split::check(shape.heads, l.cp); !s.ok())
    return s;
  if (l.cu_seqlens_padded.empty() || l.cu_seqlens_padded.front() != 0 ||
      l.cu_seqlens_padded.size() != l.samples.size() + 1)
    return fail(fmt::format("cu_seqlens_padded has {} entries for {} samples (expected one more, "
                            "starting at 0)",
                            l.cu_seqlens_padded.size(), l.samples.size()));
  for (std::size_t i = 0; i + 1 < l.cu_seqlens_padded.size(); ++i) {
    const std::int64_t padded = std::int64_t{l.cu_seqlens_padded[i + 1]} - l.cu_seqlens_padded[i];
    if (padded < 0 || padded % (2 * l.cp) != 0)
      return fail(fmt::format("sample {} (position {}) is padded to {} tokens, not a "
                              "non-negative multiple of 2 x cp = {}",
                              l.samples[i], i, padded, 2 * l.cp));
  }
  const head_split split{shape.heads, l.cp};
  // the padded tokens of the whole group times a token's row bounds both buffers
  std::int64_t whole = 0;
  if (__builtin_mul_overflow(std::int64_t{l.cu_seqlens_padded.back()}, std::int64_t{shape.heads},
                             &whole) ||
      __builtin_mul_overflow(whole, shape.head_dim, &whole) || whole > max_exchange_elements)
    return fail(fmt::format("{} padded tokens x {} heads x head_dim {} is more than "
                            "max_exchange_elements = {}",
                            l.cu_seqlens_padded.back(), shape.heads, shape.head_dim,
                            max_exchange_elements));
  const std::int64_t row = std::int64_t{shape.heads} * shape.head_dim;
  const std::int64_t cp_expected = l.tokens() * row;
  const std::int64_t hp_expected =
      std::int64_t{l.cu_seqlens_padded.back()} * split.count() * shape.head_dim;
  if (static_cast<std::int64_t>(cp_size) != cp_expected)
    return fail(fmt::format("the zigzag buffer holds {} elements, expected {} ({} tokens x {} "
                            "heads x {})",
                            cp_size, cp_expected, l.tokens(), shape.heads, shape.head_dim));
  if (static_cast<std::int64_t>(hp_size) != hp_expected)
    return fail(fmt::format("the head-parallel buffer holds {} elements, expected {} ({} padded "
                            "tokens x {} heads x {})",
                            hp_size, hp_expected, l.cu_seqlens_padded.back(), split.count(),
                            shape.head_dim));
  return status::success();
}

//! Every group rank checks its own arguments, then that all hold the same sequences and shape:
//! a rank with bad arguments fails every rank of the group with its message (no one waits in the
//! all-to-all for a peer that never comes).
template <communicator C>
void agree_on_exchange(C& group, const char* call, const thd_layout& l, head_shape shape,
                       std::size_t cp_size, std::size_t hp_size, status local) {
  if (local.ok())
    local = head_exchange_status(call, l, shape, cp_size, hp_size);
  throw_unless_agreed(group, local);
  std::uint64_t h = 1469598103934665603ULL;
  const auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ULL; };
  mix(static_cast<std::uint64_t>(shape.heads));
  mix(static_cast<std::uint64_t>(shape.head_dim));
  mix(static_cast<std::uint64_t>(l.first_rank));
  mix(static_cast<std::uint64_t>(l.cp));
  for (const std::int32_t c : l.cu_seqlens_padded)
    mix(static_cast<std::uint64_t>(c));
  check_same_everywhere(group, h, "the head-parallel exchange's sequences and head shape");
}

//! Calls `f(row_in_whole_buffer, local_token)` for each token of group rank `r`'s zigzag buffer,
//! in buffer order (sample, first chunk, second chunk).
template <class F>
void for_each_zigzag_token(const thd_layout& l, std::int32_t r, F&& f) {
  std::int64_t local = 0;
  for (std::size_t i = 0; i + 1 < l.cu_seqlens_padded.size(); ++i) {
    const std::int64_t start = l.cu_seqlens_padded[i];
    const std::int64_t chunk = zigzag_chunk_size(l.cu_seqlens_padded[i + 1] - start, l.cp);
    for (int half = 0; half < 2; ++half) {
      const std::int64_t base = start + zigzag_chunk_index(l.cp, r, half) * chunk;
      for (std::int64_t j = 0; j < chunk; ++j)
        f(base + j, local++);
    }
  }
}

//! The geometry of one exchange, shared by the host and the device paths: rows of `part`
//! values (one token's heads of one rank) copied from the source buffer into the send buffer
//! (`pack`) and from the receive buffer into the destination buffer (`unpack`), row starts in
//! values; values sent to and received from each group rank.
struct head_exchange_rows {
  std::int64_t part = 0;
  std::vector<std::int64_t> pack_from, pack_to, unpack_from, unpack_to;
  std::vector<std::int64_t> send_counts, recv_counts;

  [[nodiscard]] std::int64_t rows_packed() const noexcept {
    return static_cast<std::int64_t>(pack_from.size());
  }
  [[nodiscard]] std::int64_t rows_unpacked() const noexcept {
    return static_cast<std::int64_t>(unpack_from.size());
  }
  [[nodiscard]] std::size_t values_sent() const noexcept {
    return static_cast<std::size_t>(total_count(send_counts));
  }
  [[nodiscard]] std::size_t values_received() const noexcept {
    return static_cast<std::size_t>(total_count(recv_counts));
  }
};

//! cp2hp's rows: to each group rank q every local token's heads of q, in buffer order; from each
//! group rank r its tokens in r's buffer order, placed at their sequence positions.
[[nodiscard]] inline head_exchange_rows cp2hp_rows(const thd_layout& l, head_shape shape) {
  const head_split split{shape.heads, l.cp};
  const std::int64_t tokens = l.tokens();
  const std::int64_t row = std::int64_t{shape.heads} * shape.head_dim;
  head_exchange_rows x;
  x.part = std::int64_t{split.count()} * shape.head_dim;
  x.send_counts.assign(static_cast<std::size_t>(l.cp), tokens * x.part);
  x.recv_counts = x.send_counts;
  for (std::int32_t q = 0; q < l.cp; ++q)
    for (std::int64_t t = 0; t < tokens; ++t) {
      x.pack_from.push_back(t * row + split.first(q) * shape.head_dim);
      x.pack_to.push_back((q * tokens + t) * x.part);
    }
  std::int64_t at = 0;
  for (std::int32_t r = 0; r < l.cp; ++r)
    for_each_zigzag_token(l, r, [&](std::int64_t position, std::int64_t) {
      x.unpack_from.push_back(at);
      x.unpack_to.push_back(position * x.part);
      at += x.part;
    });
  return x;
}

//! hp2cp's rows: to each group rank r the rows of r's tokens in r's buffer order (every rank
//! holds as many tokens: the same sequences, 2 chunks of padded / 2cp each), sent by the lowest
//! holder of each head only unless `every_holder` (summing replicas); from each sending rank q
//! its heads of every local token.
[[nodiscard]] inline head_exchange_rows hp2cp_rows(const thd_layout& l, head_shape shape,
                                                   bool every_holder) {
  const head_split split{shape.heads, l.cp};
  const std::int64_t tokens = l.tokens();
  const std::int64_t row = std::int64_t{shape.heads} * shape.head_dim;
  const auto sends = [&](std::int32_t holder) {
    return every_holder || split.first_holder(holder);
  };
  head_exchange_rows x;
  x.part = std::int64_t{split.count()} * shape.head_dim;
  const std::int64_t mine = sends(l.rank_in_group) ? tokens * x.part : 0;
  x.send_counts.assign(static_cast<std::size_t>(l.cp), mine);
  x.recv_counts.assign(static_cast<std::size_t>(l.cp), 0);
  if (mine > 0) {
    std::int64_t at = 0;
    for (std::int32_t r = 0; r < l.cp; ++r)
      for_each_zigzag_token(l, r, [&](std::int64_t position, std::int64_t) {
        x.pack_from.push_back(position * x.part);
        x.pack_to.push_back(at);
        at += x.part;
      });
  }
  std::int64_t at = 0;
  for (std::int32_t q = 0; q < l.cp; ++q) {
    if (!sends(q))
      continue;
    x.recv_counts[static_cast<std::size_t>(q)] = tokens * x.part;
    for (std::int64_t t = 0; t < tokens; ++t, at += x.part) {
      x.unpack_from.push_back(at);
      x.unpack_to.push_back(t * row + split.first(q) * shape.head_dim);
    }
  }
  return x;
}

//! hp2cp's unpacking when it sums a shared head (`replica_merge::sum`, every holder sending, the
//! rows of `x` in sending-rank order, `tokens` rows each): pass j takes the rows of the j-th
//! holder of every head, so no two rows of a pass share a destination. Pass 0 is copied and each
//! further pass added, which sums every head's holders in group-rank order.
struct replica_pass {
  std::vector<std::int64_t> from, to;
};
[[nodiscard]] inline std::vector<replica_pass>
replica_passes(const head_exchange_rows& x, std::int64_t tokens, std::int32_t replicas) {
  std::vector<replica_pass> passes(static_cast<std::size_t>(replicas));
  for (std::size_t k = 0; k < x.unpack_from.size(); ++k) {
    const std::int64_t sender = static_cast<std::int64_t>(k) / tokens;
    auto& pass = passes[static_cast<std::size_t>(sender % replicas)];
    pass.from.push_back(x.unpack_from[k]);
    pass.to.push_back(x.unpack_to[k]);
  }
  return passes;
}

//! Copies row k (`part` values) from `from[k]` in `source` to `to[k]` in `dest`, for every row.
template <class T>
void copy_rows_host(std::int64_t part, const std::vector<std::int64_t>& from,
                    const std::vector<std::int64_t>& to, const T* source, T* dest) {
  for (std::size_t k = 0; k < from.size(); ++k)
    std::memcpy(dest + to[k], source + from[k], static_cast<std::size_t>(part) * sizeof(T));
}
//! `copy_rows_host`, added: dest[to[k] + e] += source[from[k] + e] (`T` arithmetic).
template <class T>
void add_rows_host(std::int64_t part, const std::vector<std::int64_t>& from,
                   const std::vector<std::int64_t>& to, const T* source, T* dest) {
  for (std::size_t k = 0; k < from.size(); ++k)
    for (std::int64_t e = 0; e < part; ++e)
      dest[to[k] + e] += source[from[k] + e];
}

} // namespace detail

//! cp2hp: from this rank's zigzag buffer `in` (`cp_elements`: its tokens of every sample of
//! `layout`, all heads) to its head-parallel buffer `out` (`hp_elements`: every padded token of
//! every sample in sequence order, `head_split::count()` heads from `head_split::first(rank in
//! group)`). `comm` is the communicator the layout's ranks refer to (the world of a plan); the
//! exchange runs on its group `[first_rank, first_rank + cp)` (`group_for`), collective over the
//! group's members. A group of one copies; an idle rank has nothing to do. Bad arguments on any
//! member fail every member with that member's message.
template <transferable T, communicator C>
requires(C::buffer_memory == memory_space::host) void cp2hp(C& comm, const thd_layout& layout,
                                                            head_shape shape, std::span<const T> in,
                                                            std::span<T> out) {
  if (layout.idle())
    return;
  if (layout.cp == 1) { // the rank's buffer is its sequences whole, every head its own
    throw_if_failed(detail::head_exchange_status("cp2hp", layout, shape, in.size(), out.size()));
    std::copy_n(in.data(), out.size(), out.data()); // sizes checked equal
    return;
  }
  C group = comm.group_for(layout.first_rank, layout.cp);
  detail::agree_on_exchange(group, "cp2hp", layout, shape, in.size(), out.size(),
                            status::success());
  const detail::head_exchange_rows x = detail::cp2hp_rows(layout, shape);
  std::vector<T> send(x.values_sent()), recv(x.values_received());
  detail::copy_rows_host(x.part, x.pack_from, x.pack_to, in.data(), send.data());
  group.all_to_all_v(std::span<const T>(send), x.send_counts, std::span<T>(recv), x.recv_counts);
  detail::copy_rows_host(x.part, x.unpack_from, x.unpack_to, recv.data(), out.data());
}

//! hp2cp: the inverse of `cp2hp`, from the head-parallel buffer `in` back to the zigzag buffer
//! `out`. A head several ranks hold comes from the lowest of them (`take_first`; the others send
//! nothing) or is the sum of all of theirs in group-rank order (`sum`, for gradients; `T`
//! arithmetic).
template <transferable T, communicator C>
requires(C::buffer_memory ==
         memory_space::host) void hp2cp(C& comm, const thd_layout& layout, head_shape shape,
                                        std::span<const T> in, std::span<T> out,
                                        replica_merge merge = replica_merge::take_first) {
  if (layout.idle())
    return;
  const status element_type =
      merge == replica_merge::sum && !std::is_arithmetic_v<T>
          ? status::failure(status_code::invalid_option,
                            "hp2cp: replica_merge::sum needs an arithmetic element type")
          : status::success();
  if (layout.cp == 1) {
    throw_if_failed(element_type);
    throw_if_failed(detail::head_exchange_status("hp2cp", layout, shape, out.size(), in.size()));
    std::copy_n(in.data(), out.size(), out.data()); // sizes checked equal
    return;
  }
  C group = comm.group_for(layout.first_rank, layout.cp);
  detail::agree_on_exchange(group, "hp2cp", layout, shape, out.size(), in.size(), element_type);
  const bool summing =
      merge == replica_merge::sum && head_split{shape.heads, layout.cp}.replicas() > 1;
  const detail::head_exchange_rows x = detail::hp2cp_rows(layout, shape, summing);
  std::vector<T> send(x.values_sent()), recv(x.values_received());
  detail::copy_rows_host(x.part, x.pack_from, x.pack_to, in.data(), send.data());
  group.all_to_all_v(std::span<const T>(send), x.send_counts, std::span<T>(recv), x.recv_counts);
  if (!summing) {
    detail::copy_rows_host(x.part, x.unpack_from, x.unpack_to, recv.data(), out.data());
    return;
  }
  if constexpr (std::is_arithmetic_v<T>) { // refused above otherwise
    const auto passes =
        detail::replica_passes(x, layout.tokens(), head_split{shape.heads, layout.cp}.replicas());
    detail::copy_rows_host(x.part, passes[0].from, passes[0].to, recv.data(), out.data());
    for (std::size_t j = 1; j < passes.size(); ++j) // in group-rank order
      detail::add_rows_host(x.part, passes[j].from, passes[j].to, recv.data(), out.data());
  }
}

} // namespace dcpp
