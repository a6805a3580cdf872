// The local communicator backend: ranks are threads of one process (unit tests, node simulation).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/error.hpp"

namespace dcpp {

namespace detail {

//! State shared by every context of one `run_local`: the first rank that failed on its own, so
//! that peers blocked in a collective fail too instead of hanging.
struct local_world {
  std::atomic<bool> aborted{false};
  std::mutex m;
  int failed_rank = -1;
  std::string reason;

  void abort(int rank, std::string why) {
    std::lock_guard lock(m);
    if (!aborted.load()) {
      failed_rank = rank;
      reason = std::move(why);
      aborted.store(true);
    }
  }
};

//! What a rank posts for a collective: its call name, the input it shares and its parameters.
struct local_post {
  const char* call = nullptr;
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  const std::int64_t* counts = nullptr; // all_to_all_v: send counts (elements), one per rank
  std::size_t element_size = 0;
  std::int64_t parameter = 0;                // root, reduce op, ...
  const std::int64_t* recv_counts = nullptr; // all_to_all_v: receive counts, one per rank
};

//! One communicator's shared state: a generation barrier, the posts of the current collective,
//! point-to-point mailboxes and the cache of sub-group contexts.
struct local_context {
  local_context(int n, std::shared_ptr<local_world> w)
      : size(n), world(std::move(w)), posts(static_cast<std::size_t>(n)) {}

  const int size;
  const std::shared_ptr<local_world> world;
  std::mutex m;
  std::condition_variable cv;
  std::uint64_t generation = 0;
  int arrived = 0;
  std::vector<local_post> posts;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<std::byte>>> mailbox; // (from,to,tag)
  std::map<std::pair<int, int>, std::shared_ptr<local_context>> children; // (first_rank, cp)

  [[noreturn]] void fail_from_peer(const char* call) const {
    throw error(status_code::communication_error,
                fmt::format("local_communicator::{}: rank {} failed: {}", call, world->failed_rank,
                            world->reason));
  }

  //! Blocks until all `size` ranks arrived (or a rank failed elsewhere: then throws).
  void barrier(const char* call) {
    std::unique_lock lock(m);
    const std::uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    while (generation == gen) {
      if (world->aborted.load())
        fail_from_peer(call);
      cv.wait_for(lock, std::chrono::milliseconds(20));
    }
  }

  //! Posts `mine`, waits for every rank, runs `read(posts)` (reads others' inputs, writes only
  //! the caller's output), and waits again so that no input is released while still read.
  template <class Read>
  void rendezvous(int rank, const local_post& mine, Read&& read) {
    posts[static_cast<std::size_t>(rank)] = mine;
    barrier(mine.call);
    for (int r = 1; r < size; ++r) // the same message on every rank
      if (std::strcmp(posts[static_cast<std::size_t>(r)].call, posts[0].call) != 0) {
        const std::string message =
            fmt::format("local_communicator: rank 0 called {} while rank {} called {}",
                        posts[0].call, r, posts[static_cast<std::size_t>(r)].call);
        barrier(mine.call);
        throw error(status_code::communication_error, message);
      }
    std::exception_ptr failure;
    try {
      read(std::span<const local_post>(posts));
    } catch (...) {
      failure = std::current_exception();
    }
    barrier(mine.call);
    if (failure)
      std::rethrow_exception(failure);
  }
};

template <reducible T>
T reduce_pair(T a, T b, reduce_op op) {
  switch (op) {
  case reduce_op::sum: return static_cast<T>(a + b);
  case reduce_op::min: return std::min(a, b);
  case reduce_op::max: return std::max(a, b);
  }
  return a;
}

} // namespace detail

class local_communicator;

//! Handle of a started `local_communicator::exchange`: the send is buffered at once, `wait()`
//! takes the matching message from the mailbox (blocking until it arrives).
class local_exchange {
public:
  local_exchange() = default;
  local_exchange(std::shared_ptr<detail::local_context> ctx, int from, int me, int tag,
                 std::byte* recv, std::size_t bytes)
      : ctx_(std::move(ctx)), from_(from), me_(me), tag_(tag), recv_(recv), bytes_(bytes) {}

  void wait() {
    if (!ctx_)
      return;
    auto ctx = std::exchange(ctx_, nullptr);
    std::unique_lock lock(ctx->m);
    const auto key = std::make_tuple(from_, me_, tag_);
    for (;;) {
      auto it = ctx->mailbox.find(key);
      if (it != ctx->mailbox.end() && !it->second.empty()) {
        std::vector<std::byte> message = std::move(it->second.front());
        it->second.pop_front();
        if (message.size() != bytes_)
          throw error(status_code::communication_error,
                      fmt::format("local_communicator::exchange: rank {} sent {} bytes with tag "
                                  "{}, rank {} expected {}",
                                  from_, message.size(), tag_, me_, bytes_));
        if (bytes_ != 0)
          std::memcpy(recv_, message.data(), bytes_);
        return;
      }
      if (ctx->world->aborted.load())
        ctx->fail_from_peer("exchange");
      ctx->cv.wait_for(lock, std::chrono::milliseconds(20));
    }
  }

private:
  std::shared_ptr<detail::local_context> ctx_;
  int from_ = 0, me_ = 0, tag_ = 0;
  std::byte* recv_ = nullptr;
  std::size_t bytes_ = 0;
};

//! A rank of a group of threads. Obtain the world ranks from `run_local`; sub-groups from
//! `group_for`. Every collective checks that all ranks called the same operation with
//! consistent sizes and throws the same `dcpp::error` on every rank when they did not.
class local_communicator {
public:
  static constexpr memory_space buffer_memory = memory_space::host;

  local_communicator(std::shared_ptr<detail::local_context> ctx, int rank)
      : ctx_(std::move(ctx)), rank_(rank), cache_(std::make_shared<group_cache>()) {}

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return ctx_->size; }

  template <transferable T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    detail::check_gather_output("local_communicator::all_gather", in.size(), out.size(), size());
    const local_post mine{"all_gather", as_bytes(in), in.size_bytes(), nullptr, sizeof(T), 0};
    ctx_->rendezvous(rank_, mine, [&](std::span<const detail::local_post> posts) {
      for (std::size_t r = 0; r < posts.size(); ++r)
        if (posts[r].bytes != mine.bytes)
          throw error(status_code::communication_error,
                      fmt::format("local_communicator::all_gather: rank {} passed {} elements, "
                                  "rank 0 passed {} (counts must be equal)",
                                  r, posts[r].bytes / sizeof(T), posts[0].bytes / sizeof(T)));
      auto* dst = reinterpret_cast<std::byte*>(out.data());
      for (std::size_t r = 0; r < posts.size(); ++r)
        copy(dst + r * mine.bytes, posts[r].data, mine.bytes);
    });
  }

  template <transferable T>
  [[nodiscard]] std::vector<T> all_gather_v(std::span<const T> in) {
    std::vector<T> out;
    const local_post mine{"all_gather_v", as_bytes(in), in.size_bytes(), nullptr, sizeof(T), 0};
    ctx_->rendezvous(rank_, mine, [&](std::span<const detail::local_post> posts) {
      std::size_t total = 0;
      for (const auto& p : posts)
        total += p.bytes / sizeof(T);
      out.resize(total);
      auto* dst = reinterpret_cast<std::byte*>(out.data());
      for (const auto& p : posts) {
        copy(dst, p.data, p.bytes);
        dst += p.bytes;
      }
    });
    return out;
  }

  template <transferable T>
  void all_to_all_v(std::span<const T> in, std::span<const std::int64_t> send_counts,
                    std::span<T> out, std::span<const std::int64_t> recv_counts) {
    throw_if_failed(detail::all_to_all_counts_status("local_communicator::all_to_all_v",
                                                     send_counts, in.size(), recv_counts,
                                                     out.size(), size()));
    local_post mine{"all_to_all_v",     as_bytes(in), in.size_bytes(),
                    send_counts.data(), sizeof(T),    0};
    mine.recv_counts = recv_counts.data();
    ctx_->rendezvous(rank_, mine, [&](std::span<const detail::local_post> posts) {
      // Every rank checks every pair, so that all ranks throw the same error.
      for (std::size_t s = 0; s < posts.size(); ++s)
        for (std::size_t d = 0; d < posts.size(); ++d) {
          const std::int64_t sent = posts[s].counts[d];
          const std::int64_t expected = posts[d].recv_counts[s];
          if (sent != expected)
            throw error(
                detail::count_mismatch("local_communicator::all_to_all_v", s, sent, d, expected));
        }
      auto* dst = reinterpret_cast<std::byte*>(out.data());
      for (std::size_t s = 0; s < posts.size(); ++s) {
        std::int64_t offset = 0; // elements before rank_ in the sender's buffer
        for (int d = 0; d < rank_; ++d)
          offset += posts[s].counts[d];
        const std::size_t bytes = static_cast<std::size_t>(recv_counts[s]) * sizeof(T);
        copy(dst, posts[s].data + static_cast<std::size_t>(offset) * sizeof(T), bytes);
        dst += bytes;
      }
    });
  }

  template <reducible T>
  void all_reduce(std::span<T> inout, reduce_op op) {
    const std::vector<T> input(inout.begin(), inout.end());
    const local_post mine{"all_reduce",       as_bytes(std::span<const T>(input)),
                          inout.size_bytes(), nullptr,
                          sizeof(T),          static_cast<std::int64_t>(op)};
    ctx_->rendezvous(rank_, mine, [&](std::span<const detail::local_post> posts) {
      for (std::size_t r = 0; r < posts.size(); ++r)
        if (posts[r].bytes != mine.bytes || posts[r].parameter != mine.parameter ||
            posts[r].element_size != sizeof(T))
          throw error(status_code::communication_error,
                      fmt::format("local_communicator::all_reduce: rank {} passed {} elements "
                                  "(op {}), rank {} passed {} (op {})",
                                  r,
                                  posts[r].bytes / std::max<std::size_t>(posts[r].element_size, 1),
                                  posts[r].parameter, rank_, inout.size(), mine.parameter));
      for (std::size_t i = 0; i < inout.size(); ++i) {
        T acc = element<T>(posts[0], i);
        for (std::size_t r = 1; r < posts.size(); ++r)
          acc = detail::reduce_pair(acc, element<T>(posts[r], i), op);
        inout[i] = acc;
      }
    });
  }

  std::uint64_t all_reduce_min(std::uint64_t value) {
    all_reduce(std::span<std::uint64_t>(&value, 1), reduce_op::min);
    return value;
  }
  std::uint64_t all_reduce_max(std::uint64_t value) {
    all_reduce(std::span<std::uint64_t>(&value, 1), reduce_op::max);
    return value;
  }

  template <transferable T>
  void broadcast(std::span<T> inout, int root) {
    detail::check_rank("local_communicator::broadcast", "root", root, size());
    const std::vector<T> input(inout.begin(), inout.end());
    const local_post mine{"broadcast",        as_bytes(std::span<const T>(input)),
                          inout.size_bytes(), nullptr,
                          sizeof(T),          root};
    ctx_->rendezvous(rank_, mine, [&](std::span<const detail::local_post> posts) {
      for (std::size_t r = 0; r < posts.size(); ++r)
        if (posts[r].bytes != mine.bytes || posts[r].parameter != root)
          throw error(status_code::communication_error,
                      fmt::format("local_communicator::broadcast: rank {} passed {} bytes with "
                                  "root {}, rank {} passed {} bytes with root {}",
                                  r, posts[r].bytes, posts[r].parameter, rank_, mine.bytes, root));
      copy(reinterpret_cast<std::byte*>(inout.data()), posts[static_cast<std::size_t>(root)].data,
           mine.bytes);
    });
  }

  void barrier() {
    ctx_->rendezvous(rank_, local_post{"barrier", nullptr, 0, nullptr, 0, 0},
                     [](std::span<const detail::local_post>) {});
  }

  //! Sends `send` to rank `to` (buffered at once) and starts receiving `recv` from rank `from`;
  //! the handle's `wait()` completes the receive. Sizes must match the matching send exactly.
  template <transferable T>
  [[nodiscard]] local_exchange exchange(std::span<const T> send, int to, std::span<T> recv,
                                        int from, int tag = 0) {
    detail::check_rank("local_communicator::exchange", "peer rank", to, size());
    detail::check_rank("local_communicator::exchange", "peer rank", from, size());
    {
      std::lock_guard lock(ctx_->m);
      const auto* bytes = reinterpret_cast<const std::byte*>(send.data());
      ctx_->mailbox[std::make_tuple(rank_, to, tag)].emplace_back(bytes, bytes + send.size_bytes());
    }
    ctx_->cv.notify_all();
    return local_exchange(ctx_, from, rank_, tag, reinterpret_cast<std::byte*>(recv.data()),
                          recv.size_bytes());
  }

  //! The communicator of ranks `[first_rank, first_rank + cp)` (this rank must be one of them),
  //! created by the first member that asks and cached on both the context and this handle.
  [[nodiscard]] local_communicator group_for(int first_rank, int cp) {
    detail::check_group("local_communicator::group_for", first_rank, cp, rank(), size());
    for (const auto& [key, comm] : cache_->groups)
      if (key == std::make_pair(first_rank, cp))
        return comm;
    std::shared_ptr<detail::local_context> child;
    {
      std::lock_guard lock(ctx_->m);
      auto& slot = ctx_->children[{first_rank, cp}];
      if (!slot)
        slot = std::make_shared<detail::local_context>(cp, ctx_->world);
      child = slot;
    }
    cache_->groups.emplace_back(std::make_pair(first_rank, cp),
                                local_communicator(child, rank_ - first_rank));
    return cache_->groups.back().second;
  }

private:
  using local_post = detail::local_post;
  struct group_cache {
    std::vector<std::pair<std::pair<int, int>, local_communicator>> groups;
  };

  template <class T>
  static const std::byte* as_bytes(std::span<const T> s) {
    return reinterpret_cast<const std::byte*>(s.data());
  }
  static void copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
    if (bytes != 0)
      std::memcpy(dst, src, bytes);
  }
  template <class T>
  static T element(const detail::local_post& p, std::size_t i) {
    T value;
    std::memcpy(&value, p.data + i * sizeof(T), sizeof(T));
    return value;
  }

  std::shared_ptr<detail::local_context> ctx_;
  int rank_;
  std::shared_ptr<group_cache> cache_;
};
static_assert(communicator<local_communicator>);

//! Runs `fn(local_communicator&)` on `size` threads, one per rank, and joins them. When ranks
//! throw, rethrows the exception of the rank that failed first on its own (ranks blocked in a
//! collective with it fail too, with an error naming that rank, instead of hanging).
template <class F>
void run_local(int size, F&& fn) {
  if (size < 1)
    throw error(status_code::invalid_option,
                fmt::format("run_local: size {} must be at least 1", size));
  auto world = std::make_shared<detail::local_world>();
  auto ctx = std::make_shared<detail::local_context>(size, world);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        try {
          local_communicator comm(ctx, r);
          fn(comm);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          world->abort(r, e.what());
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          world->abort(r, "unknown exception");
        }
      });
  }
  if (world->aborted.load()) {
    if (auto& first = errors[static_cast<std::size_t>(world->failed_rank)])
      std::rethrow_exception(first);
  }
}

} // namespace dcpp
