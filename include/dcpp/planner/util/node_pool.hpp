// A node allocator for the planner's ordered indexes (std::set): single-object allocations come
// from a free list over large chunks owned by a `node_arena`, so an erase + insert pair (how a
// load changes its key) costs no malloc/free. Not thread-safe; the arena must outlive every
// container that uses it. Other sizes go to operator new.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace dcpp {

//! Chunks of raw memory and one free list per node size class (multiples of 16 bytes, <= 128).
class node_arena {
public:
  node_arena() = default;
  node_arena(const node_arena&) = delete;
  node_arena& operator=(const node_arena&) = delete;

  void* allocate(std::size_t bytes) {
    const std::size_t c = size_class(bytes);
    if (c >= classes)
      return ::operator new(bytes);
    if (free_[c] != nullptr) {
      free_node* n = free_[c];
      free_[c] = n->next;
      return n;
    }
    const std::size_t size = (c + 1) * granule;
    if (chunk_left_ < size) {
      chunks_.push_back(std::make_unique_for_overwrite<std::byte[]>(chunk_bytes)); // not zeroed
      chunk_at_ = chunks_.back().get();
      chunk_left_ = chunk_bytes;
    }
    void* p = chunk_at_;
    chunk_at_ += size;
    chunk_left_ -= size;
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept {
    const std::size_t c = size_class(bytes);
    if (c >= classes) {
      ::operator delete(p);
      return;
    }
    auto* n = static_cast<free_node*>(p);
    n->next = free_[c];
    free_[c] = n;
  }

private:
  struct free_node {
    free_node* next;
  };
  static constexpr std::size_t granule = 16, classes = 8, chunk_bytes = 64 * 1024;
  static std::size_t size_class(std::size_t bytes) noexcept {
    return (bytes + granule - 1) / granule - 1;
  }

  std::vector<std::unique_ptr<std::byte[]>> chunks_;
  std::byte* chunk_at_ = nullptr;
  std::size_t chunk_left_ = 0;
  free_node* free_[classes] = {};
};

//! Allocator over a node_arena (single objects from the arena, arrays from operator new).
template <class T>
class node_allocator {
public:
  using value_type = T;
  explicit node_allocator(node_arena& arena) noexcept : arena_(&arena) {}
  template <class U>
  node_allocator(const node_allocator<U>& other) noexcept : arena_(other.arena_) {}

  T* allocate(std::size_t n) {
    static_assert(alignof(T) <= 16, "node_arena aligns nodes to 16 bytes");
    return static_cast<T*>(n == 1 ? arena_->allocate(sizeof(T)) : ::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1)
      arena_->deallocate(p, sizeof(T));
    else
      ::operator delete(p);
  }
  template <class U>
  bool operator==(const node_allocator<U>& other) const noexcept {
    return arena_ == other.arena_;
  }

private:
  template <class U>
  friend class node_allocator;
  node_arena* arena_;
};

} // namespace dcpp
