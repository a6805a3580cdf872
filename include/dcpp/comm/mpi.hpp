// The MPI communicator backend (Open MPI or any MPI-3 library): CPU clusters and the
// multi-process tests. Errors become dcpp::error naming the MPI call.
#pragma once

// Only MPI's C bindings are used; the deprecated C++ bindings also warn under -Wextra.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/error.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

namespace detail {

inline void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS)
    length = 0;
  throw error(status_code::communication_error,
              fmt::format("{} failed: {} (MPI error {})", call,
                          length > 0 ? std::string(text, static_cast<std::size_t>(length))
                                     : std::string("unknown error"),
                          rc));
}

//! MPI counts and displacements are `int`: larger transfers are refused with a clear error.
inline int mpi_count(std::size_t count, const char* call) {
  if (count > static_cast<std::size_t>(INT_MAX))
    throw error(status_code::communication_error,
                fmt::format("{}: {} bytes exceed the MPI-3 count limit {}", call, count, INT_MAX));
  return static_cast<int>(count);
}

template <class T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, long double>)
    return MPI_LONG_DOUBLE;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 1)
    return MPI_INT8_T;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 2)
    return MPI_INT16_T;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 4)
    return MPI_INT32_T;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 8)
    return MPI_INT64_T;
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 1)
    return MPI_UINT8_T;
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 2)
    return MPI_UINT16_T;
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 4)
    return MPI_UINT32_T;
  else {
    static_assert(std::is_integral_v<T> && sizeof(T) == 8, "no MPI datatype for this type");
    return MPI_UINT64_T;
  }
}

inline MPI_Op mpi_op(reduce_op op) {
  switch (op) {
  case reduce_op::sum: return MPI_SUM;
  case reduce_op::min: return MPI_MIN;
  case reduce_op::max: return MPI_MAX;
  }
  return MPI_SUM;
}

inline bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

} // namespace detail

//! RAII MPI initialisation for programs: MPI_Init_thread asking for `required` (default
//! MPI_THREAD_FUNNELED: MPI calls from the main thread only), MPI_Finalize at scope exit when this
//! object initialised MPI. The level MPI provides is checked, also when MPI was initialised
//! before (then with MPI_Query_thread): a lower one throws dcpp::error naming both levels. Ask
//! for MPI_THREAD_MULTIPLE to call dcpp's MPI communicator from more than one thread (for
//! example, `plan_distributed` on a prefetch thread while the main thread trains); planning
//! alone (`make_plan`) makes no MPI call.
class mpi_environment {
public:
  mpi_environment(int* argc, char*** argv, int required = MPI_THREAD_FUNNELED) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = 0;
    if (initialized == 0) {
      detail::mpi_check(MPI_Init_thread(argc, argv, required, &provided), "MPI_Init_thread");
      owner_ = true;
    } else {
      detail::mpi_check(MPI_Query_thread(&provided), "MPI_Query_thread");
    }
    provided_ = provided;
    if (provided < required) {
      if (owner_)
        MPI_Finalize();
      owner_ = false;
      throw error(status_code::communication_error,
                  fmt::format("MPI provides thread level {}, below the {} asked for: build or "
                              "configure MPI with thread support, or make all MPI calls from one "
                              "thread",
                              level_name(provided), level_name(required)));
    }
  }
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;
  ~mpi_environment() {
    if (owner_ && !detail::mpi_finalized())
      MPI_Finalize();
  }

  //! The thread level MPI provides.
  [[nodiscard]] int thread_level() const noexcept { return provided_; }

  static std::string level_name(int level) {
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return fmt::format("level {}", level);
    }
  }

private:
  bool owner_ = false;
  int provided_ = MPI_THREAD_SINGLE;
};

//! Handle of a started `mpi_communicator::exchange` (MPI_Isend + MPI_Irecv).
class mpi_exchange {
public:
  mpi_exchange() = default;
  mpi_exchange(MPI_Request send, MPI_Request recv, int expected_bytes, int from)
      : requests_{send, recv}, expected_(expected_bytes), from_(from), active_(true) {}
  mpi_exchange(mpi_exchange&& o) noexcept
      : requests_{o.requests_[0], o.requests_[1]}, expected_(o.expected_), from_(o.from_),
        active_(std::exchange(o.active_, false)) {}
  mpi_exchange& operator=(mpi_exchange&& o) noexcept {
    if (this != &o) {
      finish_quietly();
      requests_[0] = o.requests_[0];
      requests_[1] = o.requests_[1];
      expected_ = o.expected_;
      from_ = o.from_;
      active_ = std::exchange(o.active_, false);
    }
    return *this;
  }
  ~mpi_exchange() { finish_quietly(); }

  void wait() {
    if (!active_)
      return;
    active_ = false;
    MPI_Status statuses[2];
    detail::mpi_check(MPI_Waitall(2, requests_, statuses), "MPI_Waitall (exchange)");
    int received = 0;
    detail::mpi_check(MPI_Get_count(&statuses[1], MPI_BYTE, &received), "MPI_Get_count");
    if (received != expected_)
      throw error(status_code::communication_error,
                  fmt::format("mpi_communicator::exchange: rank {} sent {} bytes, {} expected",
                              from_, received, expected_));
  }

private:
  void finish_quietly() noexcept {
    if (active_ && !detail::mpi_finalized())
      MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE);
    active_ = false;
  }

  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int expected_ = 0;
  int from_ = 0;
  bool active_ = false;
};

//! A rank of an MPI communicator. dcpp works on its own duplicate of the communicator it is
//! given (`world()`, `from(comm)`): the caller's communicator, its error handler and its
//! attributes are left as they were, and dcpp's messages cannot match the caller's. Errors on
//! the duplicate are returned (MPI_ERRORS_RETURN) and raised as dcpp::error. `group_for` creates
//! CP groups with MPI_Comm_create_group (collective over the members only) and caches them;
//! `create_groups` makes every group a plan can use up front. Duplicates and groups are freed
//! when the last copy goes, groups in reverse order of creation. Collectives first check that the
//! ranks agree on sizes, so that a mismatch raises the same error on every rank.
//! Thread safety: a communicator and its copies share state; use them from one thread at a time
//! (and from more than one thread only with MPI_THREAD_MULTIPLE, see `mpi_environment`).
class mpi_communicator {
public:
  static constexpr memory_space buffer_memory = memory_space::host;

  //! dcpp's duplicate of MPI_COMM_WORLD (MPI must be initialised; collective over the world).
  static mpi_communicator world() { return from(MPI_COMM_WORLD); }

  //! dcpp's duplicate of `comm`, a communicator the caller owns and keeps (collective over
  //! `comm`, as MPI_Comm_dup is). `comm` itself is never modified nor freed.
  static mpi_communicator from(MPI_Comm comm) {
    MPI_Comm dup = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
    return mpi_communicator(dup);
  }

  [[nodiscard]] int rank() const noexcept { return state_->rank; }
  [[nodiscard]] int size() const noexcept { return state_->size; }
  [[nodiscard]] MPI_Comm native() const noexcept { return state_->comm; }

  template <transferable T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    detail::check_gather_output("mpi_communicator::all_gather", in.size(), out.size(), size());
    check_same_everywhere(*this, in.size(), "the element count of all_gather");
    const int bytes = detail::mpi_count(in.size_bytes(), "MPI_Allgather");
    detail::mpi_check(
        MPI_Allgather(in.data(), bytes, MPI_BYTE, out.data(), bytes, MPI_BYTE, native()),
        "MPI_Allgather");
  }

  template <transferable T>
  [[nodiscard]] std::vector<T> all_gather_v(std::span<const T> in) {
    const auto n = static_cast<std::size_t>(size());
    const std::int64_t mine = static_cast<std::int64_t>(in.size());
    std::vector<std::int64_t> counts(n);
    detail::mpi_check(MPI_Allgather(&mine, 1, MPI_INT64_T, counts.data(), 1, MPI_INT64_T, native()),
                      "MPI_Allgather (all_gather_v counts)");
    std::vector<int> bytes(n), displacements(n);
    std::size_t total = 0;
    for (std::size_t r = 0; r < n; ++r) {
      bytes[r] =
          detail::mpi_count(static_cast<std::size_t>(counts[r]) * sizeof(T), "MPI_Allgatherv");
      displacements[r] = detail::mpi_count(total * sizeof(T), "MPI_Allgatherv");
      total += static_cast<std::size_t>(counts[r]);
    }
    std::vector<T> out(total);
    detail::mpi_check(MPI_Allgatherv(in.data(), bytes[static_cast<std::size_t>(rank())], MPI_BYTE,
                                     out.data(), bytes.data(), displacements.data(), MPI_BYTE,
                                     native()),
                      "MPI_Allgatherv");
    return out;
  }

  template <transferable T>
  void all_to_all_v(std::span<const T> in, std::span<const std::int64_t> send_counts,
                    std::span<T> out, std::span<const std::int64_t> recv_counts) {
    const auto n = static_cast<std::size_t>(size());
    status local = detail::all_to_all_counts_status("mpi_communicator::all_to_all_v", send_counts,
                                                    in.size(), recv_counts, out.size(), size());
    // What each peer will send me, against what I expect: a mismatch fails every rank.
    std::vector<std::int64_t> announced(n), incoming(n);
    for (std::size_t r = 0; r < n; ++r)
      announced[r] = local.ok() ? send_counts[r] : 0;
    detail::mpi_check(
        MPI_Alltoall(announced.data(), 1, MPI_INT64_T, incoming.data(), 1, MPI_INT64_T, native()),
        "MPI_Alltoall (all_to_all_v counts)");
    for (std::size_t s = 0; s < n && local.ok(); ++s)
      if (incoming[s] != recv_counts[s])
        local = detail::count_mismatch("mpi_communicator::all_to_all_v", s, incoming[s],
                                       static_cast<std::size_t>(rank()), recv_counts[s]);
    throw_unless_agreed(*this, local);
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    std::size_t so = 0, ro = 0;
    for (std::size_t r = 0; r < n; ++r) {
      sc[r] =
          detail::mpi_count(static_cast<std::size_t>(send_counts[r]) * sizeof(T), "MPI_Alltoallv");
      sd[r] = detail::mpi_count(so, "MPI_Alltoallv");
      so += static_cast<std::size_t>(send_counts[r]) * sizeof(T);
      rc[r] =
          detail::mpi_count(static_cast<std::size_t>(recv_counts[r]) * sizeof(T), "MPI_Alltoallv");
      rd[r] = detail::mpi_count(ro, "MPI_Alltoallv");
      ro += static_cast<std::size_t>(recv_counts[r]) * sizeof(T);
    }
    detail::mpi_check(MPI_Alltoallv(in.data(), sc.data(), sd.data(), MPI_BYTE, out.data(),
                                    rc.data(), rd.data(), MPI_BYTE, native()),
                      "MPI_Alltoallv");
  }

  template <reducible T>
  void all_reduce(std::span<T> inout, reduce_op op) {
    // count * 4 + op is one exact value per (count, op): op < 4.
    check_same_everywhere(*this, inout.size() * 4 + static_cast<std::size_t>(op),
                          "the element count and operation of all_reduce");
    detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, inout.data(),
                                    detail::mpi_count(inout.size(), "MPI_Allreduce"),
                                    detail::mpi_datatype<T>(), detail::mpi_op(op), native()),
                      "MPI_Allreduce");
  }

  std::uint64_t all_reduce_min(std::uint64_t value) { return reduce_one(value, MPI_MIN); }
  std::uint64_t all_reduce_max(std::uint64_t value) { return reduce_one(value, MPI_MAX); }

  template <transferable T>
  void broadcast(std::span<T> inout, int root) {
    detail::check_rank("mpi_communicator::broadcast", "root", root, size());
    check_same_everywhere(*this, inout.size_bytes(), "the byte count of broadcast");
    check_same_everywhere(*this, static_cast<std::uint64_t>(root), "the root of broadcast");
    detail::mpi_check(MPI_Bcast(inout.data(), detail::mpi_count(inout.size_bytes(), "MPI_Bcast"),
                                MPI_BYTE, root, native()),
                      "MPI_Bcast");
  }

  void barrier() { detail::mpi_check(MPI_Barrier(native()), "MPI_Barrier"); }

  //! MPI_Irecv from `from` and MPI_Isend to `to` (same tag); the handle's `wait()` completes
  //! both and checks that exactly `recv.size_bytes()` bytes arrived.
  template <transferable T>
  [[nodiscard]] mpi_exchange exchange(std::span<const T> send, int to, std::span<T> recv, int from,
                                      int tag = 0) {
    for (int peer : {to, from})
      detail::check_rank("mpi_communicator::exchange", "peer rank", peer, size());
    MPI_Request rr = MPI_REQUEST_NULL, sr = MPI_REQUEST_NULL;
    const int rbytes = detail::mpi_count(recv.size_bytes(), "MPI_Irecv");
    detail::mpi_check(MPI_Irecv(recv.data(), rbytes, MPI_BYTE, from, tag, native(), &rr),
                      "MPI_Irecv");
    const int rc = MPI_Isend(send.data(), detail::mpi_count(send.size_bytes(), "MPI_Isend"),
                             MPI_BYTE, to, tag, native(), &sr);
    if (rc != MPI_SUCCESS) {
      MPI_Cancel(&rr);
      MPI_Request_free(&rr);
      detail::mpi_check(rc, "MPI_Isend");
    }
    return mpi_exchange(sr, rr, rbytes, from);
  }

  //! The communicator of ranks `[first_rank, first_rank + cp)`; collective over its members.
  [[nodiscard]] mpi_communicator group_for(int first_rank, int cp) {
    detail::check_group("mpi_communicator::group_for", first_rank, cp, rank(), size());
    if (first_rank == 0 && cp == size())
      return *this;
    for (const auto& [key, comm] : state_->groups)
      if (key == std::make_pair(first_rank, cp))
        return comm;
    MPI_Group all = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
    detail::mpi_check(MPI_Comm_group(native(), &all), "MPI_Comm_group");
    int range[1][3] = {{first_rank, first_rank + cp - 1, 1}};
    const int rc = MPI_Group_range_incl(all, 1, range, &members);
    MPI_Group_free(&all);
    detail::mpi_check(rc, "MPI_Group_range_incl");
    MPI_Comm sub = MPI_COMM_NULL;
    const int rc2 = MPI_Comm_create_group(native(), members, first_rank, &sub);
    MPI_Group_free(&members);
    detail::mpi_check(rc2, "MPI_Comm_create_group");
    state_->groups.emplace_back(std::make_pair(first_rank, cp), mpi_communicator(sub));
    return state_->groups.back().second;
  }

  //! CP groups made so far (by `group_for` or `create_groups`) that this rank belongs to.
  [[nodiscard]] std::size_t cached_groups() const noexcept { return state_->groups.size(); }

  //! Creates, before the step runs, the CP group this rank belongs to in every micro-batch of
  //! `p` (each collective over its members, in micro-batch order, as `group_for` is), so that no
  //! group is created while the step runs. Groups already made are kept.
  void create_groups(const plan& p) { detail::create_groups_of(*this, p); }

  //! Creates every CP group a plan under `options` can put this rank in, when that set is fixed:
  //! the aligned (or megatron) topology's blocks between min_cp and max_cp (call it on every rank,
  //! once, before the first step). The contiguous topology allows any block of ranks: its groups
  //! come per plan (`create_groups(plan)`), and this call throws.
  void create_groups(const plan_options& options) {
    if (options.group_topology == topology::contiguous)
      throw error(status_code::invalid_option,
                  "mpi_communicator::create_groups: the contiguous topology allows any block of "
                  "ranks; create the groups of each plan with create_groups(plan)");
    for (const std::int32_t cp : legal_cp_sizes(options)) // aligned: every block starts at k cp
      if (const int first = rank() / cp * cp; first + cp <= size())
        (void)group_for(first, cp);
  }

private:
  //! Adopts `comm`, a communicator dcpp made (a duplicate or a group): returns errors from it
  //! and frees it with the last copy.
  explicit mpi_communicator(MPI_Comm comm) : state_(std::make_shared<state>()) {
    state_->comm = comm;
    state_->owned = true;
    detail::mpi_check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    detail::mpi_check(MPI_Comm_rank(comm, &state_->rank), "MPI_Comm_rank");
    detail::mpi_check(MPI_Comm_size(comm, &state_->size), "MPI_Comm_size");
  }

  struct state {
    MPI_Comm comm = MPI_COMM_NULL;
    bool owned = false;
    int rank = 0;
    int size = 1;
    std::vector<std::pair<std::pair<int, int>, mpi_communicator>> groups;
    state() = default;
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state() {
      while (!groups.empty()) // reverse order of creation
        groups.pop_back();
      if (owned && comm != MPI_COMM_NULL && !detail::mpi_finalized())
        MPI_Comm_free(&comm);
    }
  };

  std::uint64_t reduce_one(std::uint64_t value, MPI_Op op) {
    detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_UINT64_T, op, native()),
                      "MPI_Allreduce");
    return value;
  }

  std::shared_ptr<state> state_;
};
static_assert(communicator<mpi_communicator>);

} // namespace dcpp
