// A caching allocator for the temporary storage of device-wide algorithms: Thrust's algorithms
// (and the CUB primitives its CUDA backend calls: radix sort, select, scan) take their scratch
// space from the execution policy's allocator, `thrust::cuda::par_nosync(pool).on(stream)`, in two
// phases (size query, then run). Without one, every call does cudaMalloc and cudaFree, and
// cudaFree waits for the whole device. This keeps freed blocks by size class and hands them out
// again. Plain C++ over an upstream resource (`cuda_device_memory` in dcpp/cuda/memory_resource.hpp
// on a GPU; host memory in the tests), so that the same code is tested on the CPU.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace dcpp {

//! Where a caching allocator's blocks come from: `allocate(bytes)` returns a block or throws
//! (std::bad_alloc when memory is short), `deallocate(block, bytes)` returns it.
template <class R>
concept upstream_resource = requires(R& r, void* p, std::size_t n) {
  { r.allocate(n) } -> std::same_as<void*>;
  r.deallocate(p, n);
};

//! Blocks in power-of-two size classes from `min_block` bytes, cached when freed (up to
//! `max_cached` bytes; beyond that a freed block goes back upstream) and handed out again for a
//! request of the same class. When the upstream is out of memory, the cached blocks are returned
//! to it and the request retried once; a second failure propagates.
//!
//! Streams: a block freed after work on it was enqueued on a stream may be handed out at once,
//! for work enqueued later. That is safe when every user of one allocator enqueues on the same
//! stream (work runs in order); give each stream its own allocator. Thread safe (a mutex).
//!
//! `value_type` / `allocate(n)` / `deallocate(p, n)` make it an allocator of bytes, the form
//! Thrust's execution policies take (`thrust::cuda::par_nosync(pool)`, `thrust::cpp::par(pool)`),
//! by reference: the allocator must outlive the calls.
template <upstream_resource Upstream>
class caching_allocator {
public:
  using value_type = char;
  static constexpr std::size_t min_block = 512; //!< the smallest size class, in bytes

  explicit caching_allocator(
      Upstream upstream = {},
      std::size_t max_cached = std::size_t{1}
                               << 30) noexcept(std::is_nothrow_move_constructible_v<Upstream>)
      : upstream_(std::move(upstream)), max_cached_(max_cached) {}
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;
  //! Returns the cached blocks upstream. Blocks still handed out are the caller's to free first:
  //! destroying the allocator while work uses them is a use after free, as for any allocator.
  ~caching_allocator() { release(); }

  //! A block of at least `bytes` bytes (a zero-byte request gets a `min_block` block).
  [[nodiscard]] char* allocate(std::ptrdiff_t bytes) {
    if (bytes < 0 || static_cast<std::size_t>(bytes) > max_request)
      throw std::bad_alloc();
    const std::size_t size = size_class(static_cast<std::size_t>(bytes));
    std::lock_guard lock(mutex_);
    void* block = nullptr;
    if (auto cached = free_.find(size); cached != free_.end()) {
      block = cached->second;
      free_.erase(cached);
      cached_bytes_ -= size;
    } else {
      block = fresh(size);
    }
    in_use_.emplace(block, size);
    in_use_bytes_ += size;
    ++requests_;
    return static_cast<char*>(block);
  }

  //! Takes back a block `allocate` gave (`bytes` is ignored: the block's class is known).
  void deallocate(char* p, std::size_t /*bytes*/ = 0) {
    if (p == nullptr)
      return;
    std::lock_guard lock(mutex_);
    const auto it = in_use_.find(p);
    if (it == in_use_.end())
      return; // not ours (or freed twice): leave it alone rather than corrupt the cache
    const std::size_t size = it->second;
    in_use_.erase(it);
    in_use_bytes_ -= size;
    if (cached_bytes_ + size > max_cached_) {
      upstream_.deallocate(p, size);
      --upstream_blocks_;
      return;
    }
    free_.emplace(size, p);
    cached_bytes_ += size;
  }

  //! Returns every cached (free) block upstream.
  void release() {
    std::lock_guard lock(mutex_);
    release_locked();
  }

  //! Bytes held for callers, bytes cached, blocks taken from upstream and not returned,
  //! upstream allocations made so far, and requests served so far (from the cache or upstream).
  [[nodiscard]] std::size_t in_use_bytes() const {
    std::lock_guard lock(mutex_);
    return in_use_bytes_;
  }
  [[nodiscard]] std::size_t cached_bytes() const {
    std::lock_guard lock(mutex_);
    return cached_bytes_;
  }
  [[nodiscard]] std::size_t upstream_blocks() const {
    std::lock_guard lock(mutex_);
    return upstream_blocks_;
  }
  [[nodiscard]] std::size_t upstream_allocations() const {
    std::lock_guard lock(mutex_);
    return upstream_allocations_;
  }
  [[nodiscard]] std::size_t requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

  //! The size class of a request: the next power of two from `min_block`.
  [[nodiscard]] static constexpr std::size_t size_class(std::size_t bytes) noexcept {
    return bytes <= min_block ? min_block : std::bit_ceil(bytes);
  }
  //! The largest request (so that its class is a representable power of two).
  static constexpr std::size_t max_request = std::size_t{1} << (sizeof(std::size_t) * 8 - 2);

private:
  void* fresh(std::size_t size) {
    try {
      void* block = upstream_.allocate(size);
      ++upstream_blocks_, ++upstream_allocations_;
      return block;
    } catch (const std::bad_alloc&) {
      if (free_.empty())
        throw;
    }
    release_locked(); // the cache may be what fills the memory: give it back, try once more
    void* block = upstream_.allocate(size);
    ++upstream_blocks_, ++upstream_allocations_;
    return block;
  }
  void release_locked() {
    for (const auto& [size, block] : free_) {
      upstream_.deallocate(block, size);
      --upstream_blocks_;
    }
    free_.clear();
    cached_bytes_ = 0;
  }

  Upstream upstream_;
  std::size_t max_cached_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;
  std::unordered_map<void*, std::size_t> in_use_;
  std::size_t in_use_bytes_ = 0, cached_bytes_ = 0, upstream_blocks_ = 0, upstream_allocations_ = 0,
              requests_ = 0;
};

} // namespace dcpp
