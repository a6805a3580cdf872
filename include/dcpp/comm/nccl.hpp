// The NCCL communicator backend: data buffers in device memory, work enqueued on a CUDA stream,
// aligned power-of-two CP groups split once at start-up, other groups created lazily; host
// metadata (lengths, hashes, counts) staged through device memory. Host code: compiles with g++
// against the CUDA runtime and NCCL headers, links libcudart and libnccl.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/cuda/memory.hpp" // cuda_check, where
#include "dcpp/error.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

namespace detail {

inline void nccl_check(ncclResult_t rc, const char* call,
                       std::source_location at = std::source_location::current()) {
  if (rc != ncclSuccess)
    throw error(status_code::communication_error,
                fmt::format("{} failed: {} ({}) at {}", call, ncclGetErrorString(rc),
                            static_cast<int>(rc), where(at)));
}

template <class T>
ncclDataType_t nccl_datatype() {
  if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return ncclFloat64;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 1)
    return ncclInt8;
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 1)
    return ncclUint8;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 4)
    return ncclInt32;
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 4)
    return ncclUint32;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 8)
    return ncclInt64;
  else {
    static_assert(std::is_integral_v<T> && sizeof(T) == 8, "NCCL cannot reduce this type");
    return ncclUint64;
  }
}

inline ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
  case reduce_op::sum: return ncclSum;
  case reduce_op::min: return ncclMin;
  case reduce_op::max: return ncclMax;
  }
  return ncclSum;
}

} // namespace detail

//! True when the CUDA runtime sees at least one device (GPU tests and examples skip otherwise).
[[nodiscard]] inline bool cuda_device_present() noexcept {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

//! Handle of a started `nccl_communicator::exchange`: the send/receive pair is enqueued on the
//! communicator's stream and an event recorded after it. `wait()` blocks the host on the event;
//! `wait_on(stream)` makes another stream (the compute stream) wait on the device instead.
class nccl_exchange {
public:
  nccl_exchange() = default;
  explicit nccl_exchange(cudaEvent_t done) : done_(done) {}
  nccl_exchange(nccl_exchange&& o) noexcept : done_(std::exchange(o.done_, nullptr)) {}
  nccl_exchange& operator=(nccl_exchange&& o) noexcept {
    if (this != &o) {
      release();
      done_ = std::exchange(o.done_, nullptr);
    }
    return *this;
  }
  ~nccl_exchange() { release(); }

  void wait() {
    if (!done_)
      return;
    const cudaEvent_t e = std::exchange(done_, nullptr);
    const cudaError_t rc = cudaEventSynchronize(e);
    cudaEventDestroy(e);
    detail::cuda_check(rc, "cudaEventSynchronize (exchange)");
  }
  void wait_on(cudaStream_t stream) {
    if (done_)
      detail::cuda_check(cudaStreamWaitEvent(stream, done_, 0), "cudaStreamWaitEvent (exchange)");
  }

private:
  void release() noexcept {
    if (done_) {
      cudaEventSynchronize(done_);
      cudaEventDestroy(done_);
      done_ = nullptr;
    }
  }
  cudaEvent_t done_ = nullptr;
};

//! A rank of an NCCL communicator. Data calls take device memory and are enqueued on `stream()`
//! (they do not synchronise); metadata calls (`all_gather_v`, `all_reduce_min/max`, `barrier`,
//! size checks) take host memory, stage it through a device buffer and synchronise the stream.
class nccl_communicator {
public:
  static constexpr memory_space buffer_memory = memory_space::device;

  //! Joins the communicator `id` as `rank` of `size` on the current device, then splits the
  //! aligned power-of-two groups (`ncclCommSplit`, collective over all ranks, done once).
  static nccl_communicator init(const ncclUniqueId& id, int rank, int size, cudaStream_t stream) {
    ncclComm_t comm = nullptr;
    detail::nccl_check(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
    nccl_communicator world(comm, stream);
    world.split_aligned_groups();
    return world;
  }

  //! Wraps `comm`, an NCCL communicator the caller made (its own bootstrap, a framework's
  //! process group) and keeps: dcpp enqueues its calls on `stream` and never destroys `comm`.
  //! Not collective. The CP groups dcpp makes from it (`create_groups`, `group_for`) are dcpp's,
  //! destroyed with the last copy of the returned communicator; destroy `comm` only after that.
  static nccl_communicator wrap(ncclComm_t comm, cudaStream_t stream) {
    nccl_communicator c(comm, stream);
    c.state_->owned = false;
    return c;
  }

  //! `init` with the unique id made by rank 0 and shared through a host communicator (MPI).
  template <plan_communicator Host>
  static nccl_communicator bootstrap(Host& host, cudaStream_t stream) {
    ncclUniqueId id{};
    std::vector<std::int64_t> mine;
    if (host.rank() == 0) {
      detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      for (char ch : id.internal)
        mine.push_back(static_cast<unsigned char>(ch));
    }
    const auto shared = host.all_gather_v(std::span<const std::int64_t>(mine));
    if (shared.size() != sizeof(id.internal))
      throw error(status_code::communication_error,
                  fmt::format("nccl_communicator::bootstrap: received {} id bytes, expected {}",
                              shared.size(), sizeof(id.internal)));
    for (std::size_t i = 0; i < shared.size(); ++i)
      id.internal[i] = static_cast<char>(shared[i]);
    return init(id, host.rank(), host.size(), stream);
  }

  [[nodiscard]] int rank() const noexcept { return state_->rank; }
  [[nodiscard]] int size() const noexcept { return state_->size; }
  [[nodiscard]] ncclComm_t native() const noexcept { return state_->comm; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return state_->stream; }

  template <transferable T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    detail::check_gather_output("nccl_communicator::all_gather", in.size(), out.size(), size());
    check_same_everywhere(*this, in.size(), "the element count of all_gather");
    detail::nccl_check(
        ncclAllGather(in.data(), out.data(), in.size_bytes(), ncclChar, native(), stream()),
        "ncclAllGather");
  }

  //! Host memory in and out: counts gathered first, then every rank's block padded to the
  //! largest, gathered through device memory and compacted.
  template <transferable T>
  [[nodiscard]] std::vector<T> all_gather_v(std::span<const T> in) {
    const auto n = static_cast<std::size_t>(size());
    std::vector<std::uint64_t> counts(n);
    const std::uint64_t mine = in.size();
    gather_host(std::as_bytes(std::span<const std::uint64_t>(&mine, 1)),
                std::as_writable_bytes(std::span<std::uint64_t>(counts)));
    std::uint64_t largest = 0, total = 0;
    for (auto c : counts) {
      largest = std::max(largest, c);
      total += c;
    }
    std::vector<T> block(largest), gathered(largest * n), out;
    std::copy(in.begin(), in.end(), block.begin());
    gather_host(std::as_bytes(std::span<const T>(block)),
                std::as_writable_bytes(std::span<T>(gathered)));
    out.reserve(total);
    for (std::size_t r = 0; r < n; ++r)
      out.insert(out.end(), gathered.begin() + static_cast<std::ptrdiff_t>(r * largest),
                 gathered.begin() + static_cast<std::ptrdiff_t>(r * largest + counts[r]));
    return out;
  }

  //! Grouped ncclSend/ncclRecv (NCCL has no all-to-all-v); counts are checked collectively first.
  template <transferable T>
  void all_to_all_v(std::span<const T> in, std::span<const std::int64_t> send_counts,
                    std::span<T> out, std::span<const std::int64_t> recv_counts) {
    const auto n = static_cast<std::size_t>(size());
    status local = detail::all_to_all_counts_status("nccl_communicator::all_to_all_v", send_counts,
                                                    in.size(), recv_counts, out.size(), size());
    // Every rank's send counts, gathered, against what each rank expects.
    std::vector<std::int64_t> announced(n, 0), matrix(n * n);
    for (std::size_t r = 0; r < n && local.ok(); ++r)
      announced[r] = send_counts[r];
    gather_host(std::as_bytes(std::span<const std::int64_t>(announced)),
                std::as_writable_bytes(std::span<std::int64_t>(matrix)));
    for (std::size_t s = 0; s < n && local.ok(); ++s)
      if (matrix[s * n + static_cast<std::size_t>(rank())] != recv_counts[s])
        local = detail::count_mismatch("nccl_communicator::all_to_all_v", s,
                                       matrix[s * n + static_cast<std::size_t>(rank())],
                                       static_cast<std::size_t>(rank()), recv_counts[s]);
    throw_unless_agreed(*this, local);
    const auto* src = reinterpret_cast<const char*>(in.data());
    auto* dst = reinterpret_cast<char*>(out.data());
    detail::nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t sb = static_cast<std::size_t>(send_counts[r]) * sizeof(T);
      const std::size_t rb = static_cast<std::size_t>(recv_counts[r]) * sizeof(T);
      if (sb != 0)
        detail::nccl_check(ncclSend(src, sb, ncclChar, static_cast<int>(r), native(), stream()),
                           "ncclSend (all_to_all_v)");
      if (rb != 0)
        detail::nccl_check(ncclRecv(dst, rb, ncclChar, static_cast<int>(r), native(), stream()),
                           "ncclRecv (all_to_all_v)");
      src += sb;
      dst += rb;
    }
    detail::nccl_check(ncclGroupEnd(), "ncclGroupEnd (all_to_all_v)");
  }

  template <reducible T>
  void all_reduce(std::span<T> inout, reduce_op op) {
    // count * 4 + op is one exact value per (count, op): op < 4.
    check_same_everywhere(*this, inout.size() * 4 + static_cast<std::size_t>(op),
                          "the element count and operation of all_reduce");
    detail::nccl_check(ncclAllReduce(inout.data(), inout.data(), inout.size(),
                                     detail::nccl_datatype<T>(), detail::nccl_op(op), native(),
                                     stream()),
                       "ncclAllReduce");
  }

  std::uint64_t all_reduce_min(std::uint64_t value) { return reduce_host(value, ncclMin); }
  std::uint64_t all_reduce_max(std::uint64_t value) { return reduce_host(value, ncclMax); }

  template <transferable T>
  void broadcast(std::span<T> inout, int root) {
    detail::check_rank("nccl_communicator::broadcast", "root", root, size());
    check_same_everywhere(*this, inout.size_bytes(), "the byte count of broadcast");
    check_same_everywhere(*this, static_cast<std::uint64_t>(root), "the root of broadcast");
    detail::nccl_check(ncclBroadcast(inout.data(), inout.data(), inout.size_bytes(), ncclChar, root,
                                     native(), stream()),
                       "ncclBroadcast");
  }

  //! A host-visible barrier: a staged all-reduce and a stream synchronisation.
  void barrier() { (void)reduce_host(0, ncclSum); }

  //! ncclSend to `to` and ncclRecv from `from` in one NCCL group on `stream()`; NCCL has no tags,
  //! so pairs complete in the order they were started (`tag` is accepted for the concept).
  template <transferable T>
  [[nodiscard]] nccl_exchange exchange(std::span<const T> send, int to, std::span<T> recv, int from,
                                       int tag = 0) {
    (void)tag;
    for (int peer : {to, from})
      detail::check_rank("nccl_communicator::exchange", "peer rank", peer, size());
    detail::nccl_check(ncclGroupStart(), "ncclGroupStart");
    detail::nccl_check(ncclSend(send.data(), send.size_bytes(), ncclChar, to, native(), stream()),
                       "ncclSend (exchange)");
    detail::nccl_check(ncclRecv(recv.data(), recv.size_bytes(), ncclChar, from, native(), stream()),
                       "ncclRecv (exchange)");
    detail::nccl_check(ncclGroupEnd(), "ncclGroupEnd (exchange)");
    cudaEvent_t done = nullptr;
    detail::cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    nccl_exchange handle(done);
    detail::cuda_check(cudaEventRecord(done, stream()), "cudaEventRecord (exchange)");
    return handle;
  }

  //! The communicator of ranks `[first_rank, first_rank + cp)`. Aligned power-of-two groups were
  //! split at `init`; any other group is created on first use by its members only: the group's
  //! first rank makes a unique id and sends it to the others point-to-point, then all of them
  //! call ncclCommInitRank. Cached; destroyed in reverse order of creation.
  [[nodiscard]] nccl_communicator group_for(int first_rank, int cp) {
    detail::check_group("nccl_communicator::group_for", first_rank, cp, rank(), size());
    if (first_rank == 0 && cp == size())
      return *this;
    if (auto* cached = find_group(first_rank, cp))
      return *cached;
    ncclUniqueId id{};
    if (rank() == first_rank)
      detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    auto* staging = static_cast<char*>(staging_bytes(sizeof(id)));
    if (rank() == first_rank)
      detail::cuda_check(
          cudaMemcpyAsync(staging, &id, sizeof(id), cudaMemcpyHostToDevice, stream()),
          "cudaMemcpyAsync (group id)");
    detail::nccl_check(ncclGroupStart(), "ncclGroupStart");
    if (rank() == first_rank) {
      for (int r = first_rank + 1; r < first_rank + cp; ++r)
        detail::nccl_check(ncclSend(staging, sizeof(id), ncclChar, r, native(), stream()),
                           "ncclSend (group id)");
    } else {
      detail::nccl_check(ncclRecv(staging, sizeof(id), ncclChar, first_rank, native(), stream()),
                         "ncclRecv (group id)");
    }
    detail::nccl_check(ncclGroupEnd(), "ncclGroupEnd (group id)");
    detail::cuda_check(cudaMemcpyAsync(&id, staging, sizeof(id), cudaMemcpyDeviceToHost, stream()),
                       "cudaMemcpyAsync (group id)");
    detail::cuda_check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize (group id)");
    ncclComm_t sub = nullptr;
    detail::nccl_check(ncclCommInitRank(&sub, cp, id, rank() - first_rank), "ncclCommInitRank");
    state_->groups.emplace_back(std::make_pair(first_rank, cp), nccl_communicator(sub, stream()));
    return state_->groups.back().second;
  }

  //! CP groups made so far (by `group_for` or `create_groups`) that this rank belongs to.
  [[nodiscard]] std::size_t cached_groups() const noexcept { return state_->groups.size(); }

  //! Creates, before the step runs, the CP group this rank belongs to in every micro-batch of
  //! `p` (each collective over its members, in micro-batch order, as `group_for` is), so that no
  //! communicator is initialised while the step runs. Groups already made are kept.
  void create_groups(const plan& p) { detail::create_groups_of(*this, p); }

  //! Creates every CP group a plan under `options` can use, when that set is fixed: the aligned
  //! topology's power-of-two blocks (one ncclCommSplit per size, collective over all ranks: call
  //! it on every rank, once, before the first step; `init` and `bootstrap` have done it
  //! already); the megatron topology's groups are among them, or the world itself. The contiguous
  //! topology allows any block of ranks: its groups come per plan
  //! (`create_groups(plan)`), and this call throws.
  void create_groups(const plan_options& options) {
    if (options.group_topology == topology::contiguous)
      throw error(status_code::invalid_option,
                  "nccl_communicator::create_groups: the contiguous topology allows any block "
                  "of ranks; create the groups of each plan with create_groups(plan)");
    if (!state_->aligned_split)
      split_aligned_groups();
  }

private:
  struct state {
    ncclComm_t comm = nullptr;
    bool owned = true;          //!< destroy `comm` with the last copy (not for `wrap`)
    bool aligned_split = false; //!< split_aligned_groups ran
    cudaStream_t stream = nullptr;
    int rank = 0;
    int size = 1;
    void* staging = nullptr;
    std::size_t staging_capacity = 0;
    std::vector<std::pair<std::pair<int, int>, nccl_communicator>> groups;
    state() = default;
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state() {
      while (!groups.empty()) // reverse order of creation
        groups.pop_back();
      if (staging)
        cudaFree(staging);
      if (comm && owned)
        ncclCommDestroy(comm);
    }
  };

  nccl_communicator(ncclComm_t comm, cudaStream_t stream) : state_(std::make_shared<state>()) {
    state_->comm = comm;
    state_->stream = stream;
    detail::nccl_check(ncclCommUserRank(comm, &state_->rank), "ncclCommUserRank");
    detail::nccl_check(ncclCommCount(comm, &state_->size), "ncclCommCount");
  }

  nccl_communicator* find_group(int first_rank, int cp) {
    for (auto& [key, comm] : state_->groups)
      if (key == std::make_pair(first_rank, cp))
        return &comm;
    return nullptr;
  }

  //! One ncclCommSplit per power-of-two size (2, 4, ...), every rank taking part; ranks whose
  //! aligned block would run past the world pass NCCL_SPLIT_NOCOLOR (e.g. 16 on 24 ranks).
  void split_aligned_groups() {
    state_->aligned_split = true;
    for (int cp = 2; cp < size(); cp *= 2) {
      const int first = rank() / cp * cp;
      const bool member = first + cp <= size();
      ncclComm_t sub = nullptr;
      detail::nccl_check(
          ncclCommSplit(native(), member ? rank() / cp : NCCL_SPLIT_NOCOLOR, rank(), &sub, nullptr),
          "ncclCommSplit");
      if (member)
        state_->groups.emplace_back(std::make_pair(first, cp), nccl_communicator(sub, stream()));
    }
  }

  void* staging_bytes(std::size_t bytes) {
    if (bytes > state_->staging_capacity) {
      if (state_->staging)
        detail::cuda_check(cudaFree(state_->staging), "cudaFree (staging)");
      state_->staging = nullptr;
      state_->staging_capacity = 0;
      detail::cuda_check(cudaMalloc(&state_->staging, bytes), "cudaMalloc (staging)");
      state_->staging_capacity = bytes;
    }
    return state_->staging;
  }

  //! Host all-gather of equal-sized blocks through the staging buffer (synchronises).
  void gather_host(std::span<const std::byte> in, std::span<std::byte> out) {
    auto* staging = static_cast<char*>(staging_bytes(in.size() + out.size() + 1));
    if (!in.empty())
      detail::cuda_check(
          cudaMemcpyAsync(staging, in.data(), in.size(), cudaMemcpyHostToDevice, stream()),
          "cudaMemcpyAsync (metadata in)");
    detail::nccl_check(
        ncclAllGather(staging, staging + in.size(), in.size(), ncclChar, native(), stream()),
        "ncclAllGather (metadata)");
    if (!out.empty())
      detail::cuda_check(cudaMemcpyAsync(out.data(), staging + in.size(), out.size(),
                                         cudaMemcpyDeviceToHost, stream()),
                         "cudaMemcpyAsync (metadata out)");
    detail::cuda_check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize (metadata)");
  }

  std::uint64_t reduce_host(std::uint64_t value, ncclRedOp_t op) {
    auto* staging = static_cast<std::uint64_t*>(staging_bytes(sizeof(value)));
    detail::cuda_check(
        cudaMemcpyAsync(staging, &value, sizeof(value), cudaMemcpyHostToDevice, stream()),
        "cudaMemcpyAsync (metadata in)");
    detail::nccl_check(ncclAllReduce(staging, staging, 1, ncclUint64, op, native(), stream()),
                       "ncclAllReduce (metadata)");
    detail::cuda_check(
        cudaMemcpyAsync(&value, staging, sizeof(value), cudaMemcpyDeviceToHost, stream()),
        "cudaMemcpyAsync (metadata out)");
    detail::cuda_check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize (metadata)");
    return value;
  }

  std::shared_ptr<state> state_;
};
static_assert(communicator<nccl_communicator>);

} // namespace dcpp
