// The data path on device memory: `router`'s routes as flat index maps, packed into and unpacked
// from one all-to-all-v byte buffer per micro-batch by an operations backend (`Ops`): Thrust
// algorithms under an execution policy (`route_ops.hpp`), host memory and `thrust::cpp::par` in
// the tests (bit for bit against `router`), device memory and `cuda_route_ops` (Thrust's CUDA
// policy on the NCCL communicator's stream) on a GPU. Host code only: no Thrust include here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/core/math.hpp"
#include "dcpp/error.hpp"
#include "dcpp/route/agreement.hpp"
#include "dcpp/route/fields.hpp"
#include "dcpp/route/route.hpp"
#include "dcpp/route/route_ops_maps.hpp"

namespace dcpp {

//! Every field's block inside an all-to-all buffer starts at a multiple of this many bytes, so
//! its values are aligned for their type wherever they land.
inline constexpr std::int64_t route_block_alignment = 16;

//! One micro-batch's route on one rank as flat index maps (worked out on the host once; the
//! router uploads them). Tokens to and from other ranks are listed in peer order, each peer's in
//! its segments' order; the rank's own tokens are a local copy.
struct route_maps {
  std::vector<std::int64_t> send_tokens; //!< per peer: tokens sent (0 for this rank)
  std::vector<std::int64_t> recv_tokens; //!< per peer: tokens received (0 for this rank)
  std::vector<std::int64_t> send_source; //!< per token sent: its index in the shard
  std::vector<std::int32_t> send_peer;   //!< ... its receiver
  std::vector<std::int64_t> send_slot;   //!< ... its place among the tokens to that receiver
  std::vector<std::int64_t> recv_dest;   //!< per token received: its index in the THD buffer
  std::vector<std::int32_t> recv_peer;   //!< ... its sender
  std::vector<std::int64_t> recv_slot;   //!< ... its place among the tokens from that sender
  std::vector<std::int64_t> local_source, local_dest; //!< tokens kept: shard -> THD buffer
};

[[nodiscard]] inline route_maps make_route_maps(const rank_route& r) {
  route_maps m;
  const std::size_t n = r.send.size();
  m.send_tokens.assign(n, 0);
  m.recv_tokens.assign(n, 0);
  for (std::size_t p = 0; p < n; ++p) {
    const bool self = p == static_cast<std::size_t>(r.rank);
    for (const route_segment& s : r.send[p])
      for (std::int64_t j = 0; j < s.count; ++j) {
        if (self) {
          m.local_source.push_back(s.source_offset + j);
          m.local_dest.push_back(s.dest_offset + j);
          continue;
        }
        m.send_source.push_back(s.source_offset + j);
        m.send_peer.push_back(static_cast<std::int32_t>(p));
        m.send_slot.push_back(m.send_tokens[p]++);
      }
    if (self)
      continue;
    for (const route_segment& s : r.recv[p])
      for (std::int64_t j = 0; j < s.count; ++j) {
        m.recv_dest.push_back(s.dest_offset + j);
        m.recv_peer.push_back(static_cast<std::int32_t>(p));
        m.recv_slot.push_back(m.recv_tokens[p]++);
      }
  }
  return m;
}

//! The byte layout of one all-to-all buffer: per peer a block (`bytes[peer]`, what the
//! all-to-all-v counts), inside it per field `tokens x sizeof(value)` bytes rounded up to
//! `route_block_alignment`; `offset[field][peer]` from the buffer's start.
struct field_blocks {
  std::vector<std::int64_t> bytes;
  std::vector<std::vector<std::int64_t>> offset;
  std::int64_t total = 0;
};

[[nodiscard]] inline field_blocks make_field_blocks(std::span<const std::int64_t> tokens,
                                                    std::span<const std::size_t> value_sizes) {
  field_blocks b;
  b.bytes.assign(tokens.size(), 0);
  b.offset.assign(value_sizes.size(), std::vector<std::int64_t>(tokens.size(), 0));
  for (std::size_t p = 0; p < tokens.size(); ++p)
    for (std::size_t f = 0; f < value_sizes.size(); ++f) {
      b.offset[f][p] = b.total;
      const std::int64_t used = tokens[p] * static_cast<std::int64_t>(value_sizes[f]);
      const std::int64_t padded = round_up(used, route_block_alignment);
      b.bytes[p] += padded;
      b.total += padded;
    }
  return b;
}

namespace detail {
// The two messages below are joined with std::to_string: this header is compiled by nvcc, which
// rejects fmt's compile-time checked format strings with 64-bit arguments.

//! A shard field of the wrong size.
[[nodiscard]] inline status shard_field_status(std::string_view name, std::size_t size,
                                               std::int64_t expected) {
  if (static_cast<std::int64_t>(size) == expected)
    return status::success();
  return status::failure(status_code::invalid_length,
                         "field '" + std::string(name) + "' holds " + std::to_string(size) +
                             " values, expected " + std::to_string(expected) +
                             " (the tokens of this rank)");
}
//! Buffers of the wrong size at `combine`.
[[nodiscard]] inline status combine_sizes_status(std::size_t mb, std::size_t buffer,
                                                 std::int64_t tokens, std::size_t shard,
                                                 std::int64_t shard_tokens) {
  if (static_cast<std::int64_t>(buffer) == tokens &&
      static_cast<std::int64_t>(shard) == shard_tokens)
    return status::success();
  return status::failure(status_code::invalid_length,
                         "combine: micro-batch " + std::to_string(mb) + " buffer holds " +
                             std::to_string(buffer) + " values for " + std::to_string(tokens) +
                             " tokens, the shard output " + std::to_string(shard) + " for " +
                             std::to_string(shard_tokens));
}
//! A vector's values as a span (nvcc does not take std::span's range constructor).
template <class T>
std::span<const T> view(const std::vector<T>& v) {
  return {v.data(), v.size()};
}

} // namespace detail

//! One array per field in the backend's memory (`Buffer`: `std::vector` on the host,
//! `detail::device_array` on a GPU), reached by tag.
template <template <class> class Buffer, payload_field... Fields>
struct field_arrays {
  std::tuple<Buffer<typename Fields::value_type>...> values;
  template <payload_field F>
  [[nodiscard]] auto& get() noexcept {
    return std::get<detail::field_index<F, Fields...>>(values);
  }
  template <payload_field F>
  [[nodiscard]] const auto& get() const noexcept {
    return std::get<detail::field_index<F, Fields...>>(values);
  }
};

//! The operations a device router needs from its backend (`thrust_route_ops<Policy>` in
//! route_ops.hpp, `cuda_route_ops`), on raw pointers into its memory.
template <class O>
concept route_operations = requires(O& o, const route_ops_maps& m, const void* in, void* out,
                                    std::byte* bytes, const std::int64_t* index,
                                    const std::int32_t* cu, std::int64_t* positions,
                                    std::uint8_t* real) {
  o.pack(std::size_t{}, m, in, bytes);
  o.unpack(std::size_t{}, m, bytes, out);
  o.copy(std::size_t{}, std::int64_t{}, index, index, in, out);
  o.copy_rows(std::size_t{}, std::int64_t{}, std::int64_t{}, index, index, in, out);
  o.fill(std::size_t{}, std::int64_t{}, in, out);
  o.geometry(std::int64_t{}, cu, cu, std::int32_t{}, std::int32_t{}, std::int32_t{}, positions,
             real);
  { O::movable(std::size_t{}) } -> std::convertible_to<bool>;
};

//! `router`'s twin on an operations backend and its memory. Construction is collective and
//! proves what `router`'s does (the same plan and origins everywhere); `dispatch` packs each
//! field of this rank's tokens into a byte buffer of per-(peer, field) blocks aligned to 16
//! bytes, runs one `all_to_all_v` on `comm` (whose data calls must take `Buffer`'s memory),
//! unpacks, copies the tokens that stay and fills padding; positions and real-token markers are
//! worked out on the backend from the layout. `combine` is the inverse route of one per-token
//! value. The index maps of a micro-batch are made on the host and uploaded once, at its first
//! use, and so are the block offsets of each set of fields it carries. With `cuda_route_ops`, give
//! it the NCCL communicator's stream so that the backend's kernels and the collective run in order.
template <route_operations Ops, template <class> class Buffer, communicator C,
          payload_field... Fields>
class device_router {
public:
  using arrays_type = field_arrays<Buffer, Fields...>;
  //! This rank's packed THD buffer of one micro-batch, in the backend's memory.
  struct batch_type {
    thd_layout layout;
    Buffer<std::int64_t> position_ids;
    Buffer<std::uint8_t> is_real;
    arrays_type fields;
    [[nodiscard]] std::int64_t tokens() const noexcept { return layout.tokens(); }
  };

  device_router(Ops ops, C comm, plan p, sample_origins origins, std::int64_t padding_unit = 1)
      : ops_(std::move(ops)), comm_(std::move(comm)), plan_(std::move(p)),
        origins_(std::move(origins)) {
    static_assert(((Ops::movable(sizeof(typename Fields::value_type))) && ...),
                  "device_router moves field values of 1, 2, 4, 8 or 16 bytes");
    routes_ = detail::agreed_routes(comm_, plan_, origins_, padding_unit);
    maps_.resize(routes_.size());
  }

  [[nodiscard]] std::size_t microbatches() const noexcept { return routes_.size(); }
  [[nodiscard]] const rank_route& route(std::size_t mb) const { return routes_.at(mb); }
  [[nodiscard]] const plan& get_plan() const noexcept { return plan_; }
  //! Tokens of this rank's samples (each field of the shard holds this many values).
  [[nodiscard]] std::int64_t shard_tokens() const {
    return detail::shard_tokens_of(plan_, origins_, comm_.rank());
  }

  //! This rank's THD buffer of micro-batch `mb` from every rank's `shard` (each field: the
  //! rank's tokens back to back, `shard_tokens()` values). Collective; a field of the wrong size
  //! on any rank fails every rank with its message.
  [[nodiscard]] batch_type dispatch(std::size_t mb, const arrays_type& shard) {
    return dispatch_only<Fields...>(mb, shard);
  }

  //! `dispatch` carrying only the fields `Named` (a pipeline stage's own); the others stay
  //! empty and take no bytes. Every rank names the same fields.
  template <payload_field... Named>
  [[nodiscard]] batch_type dispatch_only(std::size_t mb, const arrays_type& shard) {
    static_assert(((detail::field_index<Named, Fields...> < sizeof...(Fields)) && ...),
                  "dispatch_only names a field the router does not carry");
    status local = status::success();
    const std::int64_t expected = shard_tokens();
    const auto check = [&](std::string_view name, std::size_t size) {
      if (local.ok())
        local = detail::shard_field_status(name, size, expected);
    };
    (check(Named::name, shard.template get<Named>().size()), ...);
    throw_unless_agreed(comm_, local);
    uploaded& m = maps(mb);
    batch_type out = layout_only(mb);
    const auto n = static_cast<std::size_t>(out.layout.tokens());
    // per (peer, field) blocks of the named fields, made and uploaded at their first use
    const std::size_t sizes[] = {sizeof(typename Named::value_type)...};
    const block_layout& blocks = m.blocks_for(sizes);
    Buffer<std::byte> send(static_cast<std::size_t>(blocks.send.total));
    Buffer<std::byte> recv(static_cast<std::size_t>(blocks.recv.total));
    std::size_t f = 0;
    (ops_.pack(sizeof(typename Named::value_type), m.send_with(blocks.send_offset[f++].data()),
               shard.template get<Named>().data(), send.data()),
     ...);
    comm_.all_to_all_v(
        std::span<const std::byte>(send.data(), send.size()), detail::view(blocks.send.bytes),
        std::span<std::byte>(recv.data(), recv.size()), detail::view(blocks.recv.bytes));
    f = 0;
    (unpack_field<Named>(m, shard, recv, out, n, blocks.recv_offset[f++].data()), ...);
    return out;
  }

  //! Micro-batch `mb`'s metadata alone (layout, positions, real-token markers; every field
  //! empty), worked out on the backend. No communication.
  [[nodiscard]] batch_type layout_only(std::size_t mb) {
    batch_type out;
    out.layout = routes_.at(mb).layout;
    const std::int64_t tokens = out.layout.tokens();
    const auto n = static_cast<std::size_t>(tokens);
    out.position_ids = Buffer<std::int64_t>(n);
    out.is_real = Buffer<std::uint8_t>(n);
    if (tokens > 0) {
      const Buffer<std::int32_t> cu_padded(out.layout.cu_seqlens_padded);
      const Buffer<std::int32_t> cu(out.layout.cu_seqlens);
      ops_.geometry(tokens, cu_padded.data(), cu.data(),
                    static_cast<std::int32_t>(out.layout.samples.size()), out.layout.cp,
                    out.layout.rank_in_group, out.position_ids.data(), out.is_real.data());
    }
    return out;
  }

  //! The inverse route of one per-token value: `buffer_values` (this rank's buffer of `mb`,
  //! `tokens()` values, padding included) back into `shard_values` (`shard_tokens()`) at the
  //! tokens' places; padding values are dropped. Collective.
  template <transferable T>
  void combine(std::size_t mb, const Buffer<T>& buffer_values, Buffer<T>& shard_values) {
    static_assert(Ops::movable(sizeof(T)), "combine moves values of 1, 2, 4, 8 or 16 bytes");
    throw_unless_agreed(comm_, detail::combine_sizes_status(mb, buffer_values.size(),
                                                            routes_.at(mb).layout.tokens(),
                                                            shard_values.size(), shard_tokens()));
    uploaded& m = maps(mb);
    const std::size_t size = sizeof(T);
    // the tokens this rank received go back the way they came: out by the receive maps and
    // blocks, in by the send maps and blocks
    const block_layout& blocks = m.blocks_for(std::span<const std::size_t>(&size, 1));
    Buffer<std::byte> out_bytes(static_cast<std::size_t>(blocks.recv.total));
    Buffer<std::byte> in_bytes(static_cast<std::size_t>(blocks.send.total));
    ops_.pack(size, m.recv_with(blocks.recv_offset[0].data()), buffer_values.data(),
              out_bytes.data());
    comm_.all_to_all_v(std::span<const std::byte>(out_bytes.data(), out_bytes.size()),
                       detail::view(blocks.recv.bytes),
                       std::span<std::byte>(in_bytes.data(), in_bytes.size()),
                       detail::view(blocks.send.bytes));
    ops_.unpack(size, m.send_with(blocks.send_offset[0].data()), in_bytes.data(),
                shard_values.data());
    ops_.copy(size, static_cast<std::int64_t>(m.host.local_dest.size()), m.local_dest.data(),
              m.local_source.data(), buffer_values.data(), shard_values.data());
  }

private:
  //! The all-to-all buffers' blocks for fields of these value sizes, both ways, with each
  //! field's offsets uploaded.
  struct block_layout {
    std::vector<std::size_t> sizes;
    field_blocks send, recv;
    std::vector<Buffer<std::int64_t>> send_offset, recv_offset;
  };
  //! A micro-batch's maps on the host, their copies in `Buffer`s, and the block layouts of
  //! the field sets it has carried (a few: the router's fields, a stage's, one per `combine`
  //! value size), each made once.
  struct uploaded {
    route_maps host;
    Buffer<std::int64_t> send_source, send_slot, recv_dest, recv_slot, local_source, local_dest;
    Buffer<std::int32_t> send_peer, recv_peer;
    std::deque<block_layout> layouts; // stable references

    [[nodiscard]] const block_layout& blocks_for(std::span<const std::size_t> sizes) {
      for (const block_layout& b : layouts)
        if (std::equal(b.sizes.begin(), b.sizes.end(), sizes.begin(), sizes.end()))
          return b;
      block_layout& b = layouts.emplace_back();
      b.sizes.assign(sizes.begin(), sizes.end());
      b.send = make_field_blocks(detail::view(host.send_tokens), sizes);
      b.recv = make_field_blocks(detail::view(host.recv_tokens), sizes);
      for (const auto& o : b.send.offset)
        b.send_offset.emplace_back(o);
      for (const auto& o : b.recv.offset)
        b.recv_offset.emplace_back(o);
      return b;
    }

    [[nodiscard]] route_ops_maps send_with(const std::int64_t* offset) const {
      return {static_cast<std::int64_t>(host.send_source.size()), send_source.data(),
              send_peer.data(), send_slot.data(), offset};
    }
    [[nodiscard]] route_ops_maps recv_with(const std::int64_t* offset) const {
      return {static_cast<std::int64_t>(host.recv_dest.size()), recv_dest.data(), recv_peer.data(),
              recv_slot.data(), offset};
    }
  };

  uploaded& maps(std::size_t mb) {
    auto& slot = maps_.at(mb);
    if (!slot) {
      uploaded u;
      u.host = make_route_maps(routes_.at(mb));
      u.send_source = Buffer<std::int64_t>(u.host.send_source);
      u.send_slot = Buffer<std::int64_t>(u.host.send_slot);
      u.send_peer = Buffer<std::int32_t>(u.host.send_peer);
      u.recv_dest = Buffer<std::int64_t>(u.host.recv_dest);
      u.recv_slot = Buffer<std::int64_t>(u.host.recv_slot);
      u.recv_peer = Buffer<std::int32_t>(u.host.recv_peer);
      u.local_source = Buffer<std::int64_t>(u.host.local_source);
      u.local_dest = Buffer<std::int64_t>(u.host.local_dest);
      slot.emplace(std::move(u));
    }
    return *slot;
  }

  template <class F>
  void unpack_field(const uploaded& m, const arrays_type& shard, const Buffer<std::byte>& recv,
                    batch_type& out, std::size_t tokens, const std::int64_t* offset) {
    using T = typename F::value_type;
    auto& values = out.fields.template get<F>();
    values = Buffer<T>(tokens);
    const T padding = static_cast<T>(F::padding);
    ops_.fill(sizeof(T), static_cast<std::int64_t>(tokens), &padding, values.data());
    ops_.unpack(sizeof(T), m.recv_with(offset), recv.data(), values.data());
    ops_.copy(sizeof(T), static_cast<std::int64_t>(m.host.local_source.size()),
              m.local_source.data(), m.local_dest.data(), shard.template get<F>().data(),
              values.data());
  }

  Ops ops_;
  C comm_;
  plan plan_;
  sample_origins origins_;
  std::vector<rank_route> routes_;
  std::vector<std::optional<uploaded>> maps_;
};

} // namespace dcpp
