// The keyed index the packing policies walk (balanced's constructions and local search,
// static_cp's slots past its window): a binary min-heap of (key, id) with the ids' positions,
// ordered like a std::set of pairs but without its node allocations.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "dcpp/core/config.hpp"

namespace dcpp::detail {

//! A binary min-heap of (key, id) entries, at most one per id (ids >= 0), with the ids'
//! positions, so that a key changes in place (no stale entries). Ordered like a std::set of
//! (key, id) pairs: `top` is its first entry and `visit` walks its first entries in order
//! without changing the heap. Keys are double (not NaN) or a signed integer type.
//! `KeyBits` (integer keys) below 64: the keys lie in [-2^(KeyBits-1), 2^(KeyBits-1)), the ids
//! below 2^(64-KeyBits), and an entry packs into 64 bits, whose comparisons and moves cost about
//! half those of the 128 bits an entry takes otherwise (keys of 32 bits always pack so).
template <class Key, int KeyBits = (std::is_floating_point_v<Key> ? 64 : 8 * int{sizeof(Key)})>
class indexed_heap {
  static_assert(KeyBits >= 1 && KeyBits <= 64 && KeyBits <= 8 * int{sizeof(Key)});
  static_assert(std::is_integral_v<Key> || KeyBits == 64, "double keys take 64 bits");
  // the entry packs into 64 bits: the key's bits above, the id's below
  static constexpr bool narrow = KeyBits < 64;
  static constexpr int id_bits = narrow ? 64 - KeyBits : 32;

public:
  using entry = std::pair<Key, std::int32_t>;
  void clear() noexcept {
    for (std::size_t i = 0; i < size_; ++i)
      pos_[id_of(heap_[i])] = -1;
    heap_.assign(1, sentinel);
    size_ = 0;
  }
  //! Inserts id with `key`, or moves it to `key`.
  void set(Key key, std::int32_t id) {
    DCPP_EXPECTS(id >= 0);
    if constexpr (narrow) {
      DCPP_EXPECTS(static_cast<std::uint64_t>(id) < (std::uint64_t{1} << id_bits));
      DCPP_EXPECTS(key >= -(std::int64_t{1} << (KeyBits - 1)) &&
                   key < (std::int64_t{1} << (KeyBits - 1)));
    }
    const auto uid = static_cast<std::size_t>(id);
    if (uid >= pos_.size())
      pos_.resize(uid + 1, -1);
    const packed e = pack(key, id);
    if (pos_[uid] < 0) {
      heap_.push_back(sentinel);
      up(size_++, e);
      return;
    }
    const auto i = static_cast<std::size_t>(pos_[uid]);
    if (e < heap_[i])
      up(i, e);
    else
      down(i, e);
  }
  //! Removes id's entry; nothing when it has none.
  void erase(std::int32_t id) {
    const auto uid = static_cast<std::size_t>(id);
    if (id < 0 || uid >= pos_.size() || pos_[uid] < 0)
      return;
    const auto i = static_cast<std::size_t>(pos_[uid]);
    pos_[uid] = -1;
    // the last entry fills the hole: above the removed one it can only rise, else only sink
    const std::size_t end = --size_;
    const packed last = heap_[end];
    const packed removed = heap_[i];
    heap_.pop_back();
    heap_[end] = sentinel;
    if (i == end)
      return;
    if (last < removed)
      up(i, last);
    else
      down(i, last);
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::optional<entry> top() const noexcept {
    if (size_ == 0)
      return std::nullopt;
    return unpack(heap_.front());
  }
  //! Calls `f(entry)` on at most `limit` entries in ascending order until it returns true
  //! (best-first walk of the heap's tree).
  template <class F>
  void visit(std::int32_t limit, F&& f) {
    // the first entry without the frontier (it is the only one visited most of the time)
    if (size_ == 0 || limit <= 0 || f(unpack(heap_[0])))
      return;
    // the frontier: the entries whose parents were visited, a min-heap on their values (kept
    // beside their positions: the comparisons read no other memory)
    frontier_.clear();
    const auto later = [](const node& a, const node& b) { return b.first < a.first; };
    const auto reach = [&](std::size_t i) {
      if (i < size_) {
        frontier_.emplace_back(heap_[i], i);
        std::push_heap(frontier_.begin(), frontier_.end(), later);
      }
    };
    reach(1);
    reach(2);
    for (std::int32_t visited = 1; visited < limit && !frontier_.empty(); ++visited) {
      std::pop_heap(frontier_.begin(), frontier_.end(), later);
      const auto [value, i] = frontier_.back();
      frontier_.pop_back();
      if (f(unpack(value)))
        return;
      reach(2 * i + 1);
      reach(2 * i + 2);
    }
  }

private:
  // An entry as one 128-bit unsigned integer: the key's bits made order-preserving in the high
  // half, the id in the low half, so that comparing (key, id) pairs is one integer comparison
  // (measured: the pair comparison, double then id, was the largest single cost of the levelled
  // construction's heap updates).
  __extension__ using packed = std::conditional_t<narrow, std::uint64_t, unsigned __int128>;
  static constexpr std::uint64_t sign = std::uint64_t{1} << 63;
  // a narrow key's offset: keys from -2^(KeyBits-1) map to 0 on
  static constexpr std::uint64_t offset = std::uint64_t{1} << (KeyBits - 1);
  // narrow entries keep at least one key bit, wide ones 32 id bits
  static_assert(id_bits < 64);
  static constexpr std::uint64_t id_mask = (std::uint64_t{1} << id_bits) - 1;
  // after the last entry, never below one (128 bits: above every entry, ids being below 2^31;
  // 64 bits: at most equal to the largest key with the largest id, and the sift takes the right
  // child only when it is smaller): a node's second child always exists, so the sift picks the
  // smaller child without a bounds test
  static constexpr packed sentinel = ~packed{0};
  static std::uint64_t ordered_bits(Key key) noexcept {
    if constexpr (std::is_floating_point_v<Key>) {
      static_assert(sizeof(Key) == sizeof(std::uint64_t));
      // +0.0 for -0.0 (they compare equal as keys); negative keys: all bits flipped
      const auto bits = std::bit_cast<std::uint64_t>(key + Key{0});
      return (bits & sign) != 0 ? ~bits : bits | sign;
    } else {
      static_assert(std::is_integral_v<Key> && std::is_signed_v<Key> && sizeof(Key) <= 8);
      return static_cast<std::uint64_t>(static_cast<std::int64_t>(key)) ^ sign;
    }
  }
  static Key key_of_bits(std::uint64_t bits) noexcept {
    if constexpr (std::is_floating_point_v<Key>)
      return std::bit_cast<Key>((bits & sign) != 0 ? bits & ~sign : ~bits);
    else
      return static_cast<Key>(static_cast<std::int64_t>(bits ^ sign));
  }
  static packed pack(Key key, std::int32_t id) noexcept {
    if constexpr (narrow)
      return ((static_cast<std::uint64_t>(static_cast<std::int64_t>(key)) + offset) << id_bits) |
             static_cast<std::uint64_t>(id);
    else
      return (packed{ordered_bits(key)} << 64) | static_cast<std::uint32_t>(id);
  }
  static std::size_t id_of(packed e) noexcept {
    return static_cast<std::size_t>(static_cast<std::uint64_t>(e) & id_mask);
  }
  static entry unpack(packed e) noexcept {
    if constexpr (narrow)
      return {static_cast<Key>(static_cast<std::int64_t>((e >> id_bits) - offset)),
              static_cast<std::int32_t>(id_of(e))};
    else
      return {key_of_bits(static_cast<std::uint64_t>(e >> 64)),
              static_cast<std::int32_t>(id_of(e))};
  }
  void place(std::size_t i, packed e) {
    heap_[i] = e;
    pos_[id_of(e)] = static_cast<std::int32_t>(i);
  }
  void up(std::size_t i, packed e) {
    while (i > 0 && e < heap_[(i - 1) / 2]) {
      place(i, heap_[(i - 1) / 2]);
      i = (i - 1) / 2;
    }
    place(i, e);
  }
  void down(std::size_t i, packed e) {
    for (;;) {
      std::size_t c = 2 * i + 1;
      if (c >= size_)
        break;
      // the smaller child (the sentinel at size_ is never smaller), selected without a branch
      // (random keys defeat the branch predictor) and without loading it again
      const packed left = heap_[c];
      const packed right = heap_[c + 1];
      const bool take_right = right < left;
      const packed child = take_right ? right : left;
      c += static_cast<std::size_t>(take_right);
      if (!(child < e))
        break;
      place(i, child);
      i = c;
    }
    place(i, e);
  }
  std::vector<packed> heap_ = std::vector<packed>(1, sentinel); // size_ entries, then sentinel
  std::size_t size_ = 0;
  std::vector<std::int32_t> pos_;              // id -> index in heap_, -1 when absent
  using node = std::pair<packed, std::size_t>; // a frontier entry: value and position
  std::vector<node> frontier_;
};

} // namespace dcpp::detail
