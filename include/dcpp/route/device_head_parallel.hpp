// The head-parallel exchange (cp2hp / hp2cp, see head_parallel.hpp) on a device router's
// operations backend: the same layouts and checks, the packing done by the backend's row copies
// (Thrust under an execution policy), so that on a GPU the buffers never leave device memory.
// `Buffer` is the backend's array type, as for `device_router`.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/error.hpp"
#include "dcpp/route/device_router.hpp"
#include "dcpp/route/head_parallel.hpp"

namespace dcpp {

namespace detail {
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
//! The sending half of an exchange on the backend: pack the rows of `x`, one all-to-all-v on
//! `group`; returns what arrived.
template <template <class> class Buffer, class Ops, class T, class C>
Buffer<T> send_rows_on(Ops& ops, C& group, const head_exchange_rows& x, const T* in) {
  const Buffer<std::int64_t> pack_from(x.pack_from), pack_to(x.pack_to);
  Buffer<T> send(x.values_sent());
  Buffer<T> recv(x.values_received());
  ops.copy_rows(sizeof(T), x.rows_packed(), x.part, pack_from.data(), pack_to.data(), in,
                send.data());
  group.all_to_all_v(std::span<const T>(send.data(), send.size()), view(x.send_counts),
                     std::span<T>(recv.data(), recv.size()), view(x.recv_counts));
  return recv;
}
//! The exchange of `x` on the backend: pack, one all-to-all-v on `group`, unpack.
template <template <class> class Buffer, class Ops, class T, class C>
void exchange_rows_on(Ops& ops, C& group, const head_exchange_rows& x, const T* in, T* out) {
  const Buffer<T> recv = send_rows_on<Buffer>(ops, group, x, in);
  const Buffer<std::int64_t> unpack_from(x.unpack_from), unpack_to(x.unpack_to);
  ops.copy_rows(sizeof(T), x.rows_unpacked(), x.part, unpack_from.data(), unpack_to.data(),
                recv.data(), out);
}
//! hp2cp summing shared heads on the backend: the first holders' rows copied, every further
//! holder's added, pass by pass (`replica_passes`, the host path's order).
template <template <class> class Buffer, class Ops, class T, class C>
void exchange_rows_summing_on(Ops& ops, C& group, const head_exchange_rows& x, std::int64_t tokens,
                              std::int32_t replicas, const T* in, T* out) {
  const Buffer<T> recv = send_rows_on<Buffer>(ops, group, x, in);
  const auto passes = replica_passes(x, tokens, replicas);
  for (std::size_t j = 0; j < passes.size(); ++j) {
    const Buffer<std::int64_t> from(passes[j].from), to(passes[j].to);
    const auto rows = static_cast<std::int64_t>(passes[j].from.size());
    if (j == 0)
      ops.copy_rows(sizeof(T), rows, x.part, from.data(), to.data(), recv.data(), out);
    else
      ops.add_rows(rows, x.part, from.data(), to.data(), recv.data(), out);
  }
}
} // namespace detail

//! Whether backend `Ops` adds values of `T` (`add_rows`), as `hp2cp` with `replica_merge::sum`
//! needs: `thrust_route_ops` for every arithmetic type, `cuda_route_ops` for float and double.
template <class Ops, class T>
inline constexpr bool adds_rows_of = requires(Ops& o, const std::int64_t* index, const T* source,
                                              T* dest) {
  o.add_rows(std::int64_t{}, std::int64_t{}, index, index, source, dest);
};

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
  detail::exchange_rows_on<Buffer>(ops, group, detail::cp2hp_rows(layout, shape), in.data(),
                                   out.data());
}

//! `hp2cp` (head_parallel.hpp) on an operations backend. A head several ranks hold comes from
//! the lowest of them (`replica_merge::take_first`) or is the sum of all of theirs in group-rank
//! order (`replica_merge::sum`, for backends that add values of `T`: `adds_rows_of`; refused on
//! every rank of the group otherwise). Bit for bit the host path's results.
template <template <class> class Buffer, route_operations Ops, transferable T, communicator C>
void hp2cp(Ops& ops, C& comm, const thd_layout& layout, head_shape shape, std::span<const T> in,
           std::span<T> out, replica_merge merge = replica_merge::take_first) {
  static_assert(Ops::movable(sizeof(T)), "the exchange moves values of 1, 2, 4, 8 or 16 bytes");
  if (layout.idle())
    return;
  // with no shared head (heads >= cp) both merges are the same copy
  const bool summing = merge == replica_merge::sum && shape.heads >= 1 && shape.heads < layout.cp;
  const status merging =
      summing && !adds_rows_of<Ops, T>
          ? status::failure(status_code::invalid_option,
                            "hp2cp: replica_merge::sum needs a backend that adds values of this "
                            "element type (cuda_route_ops: float and double)")
          : status::success();
  if (layout.cp == 1) {
    throw_if_failed(detail::head_exchange_status("hp2cp", layout, shape, out.size(), in.size()));
    detail::copy_whole<Buffer>(ops, in.data(), out.data(), out.size());
    return;
  }
  C group =
      detail::device_exchange_group(comm, "hp2cp", layout, shape, out.size(), in.size(), merging);
  if constexpr (adds_rows_of<Ops, T>)
    if (summing) {
      detail::exchange_rows_summing_on<Buffer>(
          ops, group, detail::hp2cp_rows(layout, shape, true), layout.tokens(),
          head_split{shape.heads, layout.cp}.replicas(), in.data(), out.data());
      return;
    }
  detail::exchange_rows_on<Buffer>(ops, group, detail::hp2cp_rows(layout, shape, false), in.data(),
                                   out.data());
}

} // namespace dcpp
