// The communicator concept (collectives, ring point-to-point, CP sub-groups) and fail-together
// agreement checks shared by every backend.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/plan_communicator.hpp"
#include "dcpp/error.hpp"

namespace dcpp {

//! Reductions every backend provides for arithmetic element types.
enum class reduce_op : std::uint8_t { sum, min, max };

//! Where a backend's data buffers live: the local and MPI backends move host memory, the NCCL
//! backend device memory. Metadata calls (`all_gather_v`, `all_reduce_min/max`) are host memory
//! on every backend.
enum class memory_space : std::uint8_t { host, device };

//! Element types a communicator moves: anything trivially copyable (sent as bytes).
template <class T>
concept transferable = std::is_trivially_copyable_v<T> && !std::is_const_v<T>;

//! Element types a communicator reduces.
template <class T>
concept reducible = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

//! A started pair of point-to-point transfers; `wait()` completes both (and rethrows errors).
template <class H>
concept exchange_handle = std::movable<H> && requires(H& h) {
  h.wait();
};

//! Everything dcpp needs from a communicator; every backend (local threads, MPI, NCCL) models it.
//! Data calls are collective over the communicator (every rank calls them, in the same order):
//! * `all_gather(in, out)`: fixed count, `out.size() == size() * in.size()`, rank order;
//! * `all_gather_v(in) -> std::vector<T>` (host memory, variable counts, rank order);
//! * `all_to_all_v(in, send_counts, out, recv_counts)`: `send_counts[r]` elements of `in` go to
//!   rank `r`, in rank order; `recv_counts[r]` arrive from rank `r`, in rank order;
//! * `all_reduce(inout, op)`, `broadcast(inout, root)`, `barrier()`;
//! * `exchange(send, to, recv, from, tag)`: a non-blocking send/receive pair (the ring step);
//!   returns a handle whose `wait()` completes both;
//! * `group_for(first_rank, cp)`: the communicator of ranks `[first_rank, first_rank + cp)`,
//!   created on first use and cached; collective over the members of that group only.
//! A communicator value is a handle: copies share the endpoint and its group cache.
template <class C>
concept communicator = plan_communicator<C> && std::copyable<C> &&
    requires(C& c, std::span<const double> in, std::span<double> out,
             std::span<const std::int64_t> counts, int peer) {
  { C::buffer_memory } -> std::convertible_to<memory_space>;
  c.all_gather(in, out);
  { c.all_gather_v(in) } -> std::same_as<std::vector<double>>;
  c.all_to_all_v(in, counts, out, counts);
  c.all_reduce(out, reduce_op::sum);
  c.broadcast(out, peer);
  c.barrier();
  { c.exchange(in, peer, out, peer, peer) } -> exchange_handle;
  { c.group_for(peer, peer) } -> std::same_as<C>;
};

namespace detail {
// Argument checks every backend runs before a collective; `call` names the backend and the call
// ("mpi_communicator::all_to_all_v"), so the messages say where they come from.

[[noreturn]] inline void fail_call(std::string message) {
  throw error(status_code::communication_error, std::move(message));
}

//! The elements an all-to-all-v's counts add up to (the size of its send or receive buffer).
[[nodiscard]] inline std::int64_t total_count(std::span<const std::int64_t> counts) noexcept {
  std::int64_t t = 0;
  for (const std::int64_t c : counts)
    t += c;
  return t;
}

//! Counts of an all-to-all-v: one per rank, none negative, summing to at most the buffer.
[[nodiscard]] inline status counts_status(const char* call, std::span<const std::int64_t> counts,
                                          int size, std::size_t elements, const char* what) {
  auto fail = [](std::string m) {
    return status::failure(status_code::communication_error, std::move(m));
  };
  if (counts.size() != static_cast<std::size_t>(size))
    return fail(fmt::format("{}: {} has {} entries, expected {} (one per rank)", call, what,
                            counts.size(), size));
  std::int64_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0)
      return fail(fmt::format("{}: {}[{}] = {} is negative", call, what, r, counts[r]));
    total += counts[r];
  }
  if (static_cast<std::size_t>(total) > elements)
    return fail(
        fmt::format("{}: {} sum to {} elements, the buffer holds {}", call, what, total, elements));
  return status::success();
}

//! Both count vectors of an all-to-all-v (send against the input, receive against the output).
[[nodiscard]] inline status all_to_all_counts_status(const char* call,
                                                     std::span<const std::int64_t> send_counts,
                                                     std::size_t in,
                                                     std::span<const std::int64_t> recv_counts,
                                                     std::size_t out, int size) {
  status s = counts_status(call, send_counts, size, in, "send_counts");
  return s.ok() ? counts_status(call, recv_counts, size, out, "recv_counts") : s;
}

//! A sender announcing a different count than its receiver expects.
[[nodiscard]] inline status count_mismatch(const char* call, std::size_t sender, std::int64_t sent,
                                           std::size_t receiver, std::int64_t expected) {
  return status::failure(status_code::communication_error,
                         fmt::format("{}: rank {} sends {} elements to rank {}, which expects {}",
                                     call, sender, sent, receiver, expected));
}

//! The output of a fixed-count all-gather holds `size` blocks of the input's length.
inline void check_gather_output(const char* call, std::size_t in, std::size_t out, int size) {
  const std::size_t expected = in * static_cast<std::size_t>(size);
  if (out != expected)
    fail_call(fmt::format("{}: output holds {} elements, expected {} ({} ranks x {})", call, out,
                          expected, size, in));
}

//! A root or peer rank inside the communicator (`what`: "root", "peer rank").
inline void check_rank(const char* call, const char* what, int rank, int size) {
  if (rank < 0 || rank >= size)
    fail_call(fmt::format("{}: {} {} is outside [0, {})", call, what, rank, size));
}

//! A sub-group inside the communicator that contains the calling rank.
inline void check_group(const char* call, int first_rank, int cp, int rank, int size) {
  if (cp < 1 || first_rank < 0 || first_rank + cp > size || rank < first_rank ||
      rank >= first_rank + cp)
    fail_call(fmt::format("{}: group [{}, {}) must lie in [0, {}) and contain the calling rank {}",
                          call, first_rank, first_rank + cp, size, rank));
}
} // namespace detail

//! Fail together: every rank passes its own local check result; every rank gets back the same
//! status, that of the lowest failing rank with its message prefixed by `rank R: `, or success
//! when all passed. One min-reduction, plus one variable gather only when something failed.
template <plan_communicator C>
[[nodiscard]] status agree(C& comm, const status& local) {
  constexpr std::uint64_t none = std::numeric_limits<std::uint64_t>::max();
  const auto me = static_cast<std::uint64_t>(comm.rank());
  const std::uint64_t first_failing = comm.all_reduce_min(local.ok() ? none : me);
  if (first_failing == none)
    return status::success();
  // The failing rank publishes code, sample and message (one character per element).
  std::vector<std::int64_t> mine;
  if (first_failing == me) {
    mine.push_back(static_cast<std::int64_t>(local.code));
    mine.push_back(local.sample);
    for (char ch : local.message)
      mine.push_back(static_cast<unsigned char>(ch));
  }
  const std::vector<std::int64_t> all = comm.all_gather_v(std::span<const std::int64_t>(mine));
  if (all.size() < 2)
    return status::failure(status_code::communication_error,
                           fmt::format("rank {} failed a collective check", first_failing));
  std::string message = fmt::format("rank {}: ", first_failing);
  for (std::size_t i = 2; i < all.size(); ++i)
    message.push_back(static_cast<char>(all[i]));
  return status::failure(static_cast<status_code>(all[0]), std::move(message), all[1]);
}

namespace detail {
//! `create_groups(plan)` of the MPI and NCCL communicators: `comm.group_for` on the group this
//! rank belongs to in every micro-batch of `p`, in micro-batch order (each call collective over
//! the group's members, cached by the communicator).
template <class C, class Plan>
void create_groups_of(C& comm, const Plan& p) {
  for (const auto& mb : p.microbatches)
    for (const auto& g : mb.groups)
      if (comm.rank() >= g.first_rank && comm.rank() < g.first_rank + g.cp)
        (void)comm.group_for(g.first_rank, g.cp);
}
} // namespace detail

//! `agree`, then throw the agreed error on every rank.
template <plan_communicator C>
void throw_unless_agreed(C& comm, const status& local) {
  throw_if_failed(agree(comm, local));
}

//! Checks collectively that every rank passed the same 64-bit value (a hash, a size); on
//! disagreement every rank throws the same error naming `what` and the smallest/largest values.
template <plan_communicator C>
void check_same_everywhere(C& comm, std::uint64_t value, const char* what) {
  const std::uint64_t lo = comm.all_reduce_min(value);
  const std::uint64_t hi = comm.all_reduce_max(value);
  if (lo != hi)
    throw error(status_code::communication_error,
                fmt::format("ranks disagree on {}: values range from {} to {}", what, lo, hi));
}

} // namespace dcpp
