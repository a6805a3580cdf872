// The head-parallel exchange (cp2hp / hp2cp, see head_parallel.hpp) on a device router's
// operations backend: the same layouts and checks, the packing done by the backend's row copies
// (Thrust under an execution policy), so that on a GPU the buffers never leave device memory.
// `Buffer` is the backend's array type, as for `device_router`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/error.hpp"
#include "dcpp/route/device_router.hpp"
#include "dcpp/route/head_parallel.hpp"

namespace dcpp {

namespace detail {
//! Row maps of one exchange direction (row starts in values): `from` in the source buffer,
//! `to` in the destination buffer.
struct row_maps {
  std::vector<std::int64_t> from, to;
  void add(std::int64_t f, std::int64_t t) {
    from.push_back(f);
    to.push_back(t);
  }
};

//! The group's communicator for a device exchange, after the checks every member agrees on.
template <communicator C>
C device_exchange_group(C& comm, const char* call, const thd_layout& l, head_shape shape,
                        std::size_t cp_size, std::size_t hp_size, status local) {
  C group = comm.group_for(l.first_rank, l.cp);
  agree_on_exchange(group, call, l, shape, cp_size, hp_size, local);
  return group;
}

//! A single-rank group: the buffers are the same values, copied by the backend.
template <template <class> class Buffer, class Ops, class T>
void copy_whole(Ops& ops, const T* in, T* out, std::size_t n) {
  const Buffer<std::int64_t> zero(std::vector<std::int64_t>{0});
  ops.copy_rows(sizeof(T), 1, static_cast<std::int64_t>(n), zero.data(), zero.data(), in, out);
}
} // namespace detail

//! `cp2hp` (head_parallel.hpp) on an operations backend: `in` and `out` in the backend's memory
//! (device memory with `cuda_route_ops` and the NCCL communicator). Same checks, same results.
template <template <class> class Buffer, route_operations Ops, transferable T, communicator C>
void cp2hp(Ops& ops, C& comm, const thd_layout& layout, head_shape shape, std::span<const T> in,
           std::span<T> out) {
  static_assert(Ops::movable(sizeof(T)), "the exchange moves values of 1, 2, 4, 8 or 16 bytes");
  if (layout.idle())
    return;
  if (layout.cp == 1) {
    throw_if_failed(detail::head_exchange_status("cp2hp", layout, shape, in.size(), out.size()));
    detail::copy_whole<Buffer>(ops, in.data(), out.data(), out.size());
    return;
  }
  C group = detail::device_exchange_group(comm, "cp2hp", layout, shape, in.size(), out.size(),
                                          status::success());
  const head_split split{shape.heads, layout.cp};
  const std::int32_t cp = layout.cp;
  const std::int64_t tokens = layout.tokens();
  const std::int64_t row = std::int64_t{shape.heads} * shape.head_dim;
  const std::int64_t part = std::int64_t{split.count()} * shape.head_dim;
  detail::row_maps pack, unpack;
  for (std::int32_t q = 0; q < cp; ++q)
    for (std::int64_t t = 0; t < tokens; ++t)
      pack.add(t * row + split.first(q) * shape.head_dim, (q * tokens + t) * part);
  std::int64_t at = 0;
  for (std::int32_t r = 0; r < cp; ++r)
    detail::for_each_zigzag_token(layout, r, [&](std::int64_t position, std::int64_t) {
      unpack.add(at, position * part);
      at += part;
    });
  const Buffer<std::int64_t> pack_from(pack.from), pack_to(pack.to);
  const Buffer<std::int64_t> unpack_from(unpack.from), unpack_to(unpack.to);
  Buffer<T> send(static_cast<std::size_t>(tokens * part * cp));
  Buffer<T> recv(send.size());
  const auto rows = static_cast<std::int64_t>(pack.from.size());
  ops.copy_rows(sizeof(T), rows, part, pack_from.data(), pack_to.data(), in.data(), send.data());
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(cp), tokens * part);
  group.all_to_all_v(std::span<const T>(send.data(), send.size()), detail::view(counts),
                     std::span<T>(recv.data(), recv.size()), detail::view(counts));
  ops.copy_rows(sizeof(T), rows, part, unpack_from.data(), unpack_to.data(), recv.data(),
                out.data());
}

//! `hp2cp` (head_parallel.hpp) on an operations backend. A head several ranks hold comes from
//! the lowest of them (`replica_merge::take_first`); summing replicas is host-only for now and
//! refused here on every rank of the group.
template <template <class> class Buffer, route_operations Ops, transferable T, communicator C>
void hp2cp(Ops& ops, C& comm, const thd_layout& layout, head_shape shape, std::span<const T> in,
           std::span<T> out, replica_merge merge = replica_merge::take_first) {
  static_assert(Ops::movable(sizeof(T)), "the exchange moves values of 1, 2, 4, 8 or 16 bytes");
  if (layout.idle())
    return;
  // with no shared head (heads >= cp) both merges are the same copy
  const status merging =
      merge == replica_merge::sum && shape.heads >= 1 && shape.heads < layout.cp
          ? status::failure(status_code::invalid_option,
                            "hp2cp: summing the replicas of a shared head runs on host buffers "
                            "only (replica_merge::sum); a device backend takes the first holder's")
          : status::success();
  if (layout.cp == 1) {
    throw_if_failed(detail::head_exchange_status("hp2cp", layout, shape, out.size(), in.size()));
    detail::copy_whole<Buffer>(ops, in.data(), out.data(), out.size());
    return;
  }
  C group =
      detail::device_exchange_group(comm, "hp2cp", layout, shape, out.size(), in.size(), merging);
  const head_split split{shape.heads, layout.cp};
  const std::int32_t cp = layout.cp;
  const std::int32_t me = layout.rank_in_group;
  const std::int64_t tokens = layout.tokens();
  const std::int64_t row = std::int64_t{shape.heads} * shape.head_dim;
  const std::int64_t part = std::int64_t{split.count()} * shape.head_dim;
  const std::int64_t mine = split.first_holder(me) ? tokens * part : 0;
  std::vector<std::int64_t> send_counts(static_cast<std::size_t>(cp), mine);
  std::vector<std::int64_t> recv_counts(static_cast<std::size_t>(cp));
  detail::row_maps pack, unpack;
  if (mine > 0) {
    std::int64_t at = 0;
    for (std::int32_t r = 0; r < cp; ++r)
      detail::for_each_zigzag_token(layout, r, [&](std::int64_t position, std::int64_t) {
        pack.add(position * part, at);
        at += part;
      });
  }
  std::int64_t at = 0;
  for (std::int32_t q = 0; q < cp; ++q) {
    if (!split.first_holder(q))
      continue;
    recv_counts[static_cast<std::size_t>(q)] = tokens * part;
    for (std::int64_t t = 0; t < tokens; ++t, at += part)
      unpack.add(at, t * row + split.first(q) * shape.head_dim);
  }
  const Buffer<std::int64_t> pack_from(pack.from), pack_to(pack.to);
  const Buffer<std::int64_t> unpack_from(unpack.from), unpack_to(unpack.to);
  Buffer<T> send(static_cast<std::size_t>(mine * cp));
  Buffer<T> recv(static_cast<std::size_t>(at));
  ops.copy_rows(sizeof(T), static_cast<std::int64_t>(pack.from.size()), part, pack_from.data(),
                pack_to.data(), in.data(), send.data());
  group.all_to_all_v(std::span<const T>(send.data(), send.size()), detail::view(send_counts),
                     std::span<T>(recv.data(), recv.size()), detail::view(recv_counts));
  ops.copy_rows(sizeof(T), static_cast<std::int64_t>(unpack.from.size()), part, unpack_from.data(),
                unpack_to.data(), recv.data(), out.data());
}

} // namespace dcpp
