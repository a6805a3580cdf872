// Tests for include/dcpp/planner/util/indexed_heap.hpp against a std::set.
#include "../../support.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include "dcpp/planner/util/indexed_heap.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
// Random sets, moves both ways, erasures (of present and absent ids), ties between ids, negative
// keys (and -0.0 beside 0.0 for doubles: equal keys), ids up to 1,000, rounds cleared; visit,
// top and size against a std::set. `Heap` may narrow the keys (`KeyBits`): `key_bits` then moves
// the keys to the ends of [-2^(key_bits-1), 2^(key_bits-1)) and `id_bits` the ids to the top of
// [0, 2^id_bits), where a packing that lost a bit would misorder them.
template <class Key, class Heap = dcpp::detail::indexed_heap<Key>>
void check_indexed_heap(std::uint64_t seed, int key_bits = 0, int id_bits = 0) {
  dcpp::workload::rng r(seed);
  Heap heap;
  // the id of a slot: itself, or counting down from 2^id_bits - 1
  const auto id_of = [&](std::int32_t slot) {
    return id_bits == 0 ? slot : static_cast<std::int32_t>((std::int64_t{1} << id_bits) - 1 - slot);
  };
  std::vector<std::optional<Key>> key(1000); // current key per id
  std::set<std::pair<Key, std::int32_t>> reference;
  for (int step = 0; step < 6000; ++step) {
    if (step % 1000 == 999) { // a new round
      heap.clear();
      reference.clear();
      std::fill(key.begin(), key.end(), std::nullopt);
      CHECK_FALSE(heap.top().has_value());
    }
    // ids from a small set (collisions) or the whole range (sparse ids)
    const auto slot =
        static_cast<std::int32_t>(step % 3 == 0 ? r.uniform_int(0, 999) : r.uniform_int(0, 39));
    const auto uid = static_cast<std::size_t>(slot);
    Key next = static_cast<Key>(r.uniform_int(0, 40)) - Key{20};
    const std::int32_t id = id_of(slot);
    if (key_bits > 0) { // within 20 of either end
      const std::int64_t least = std::numeric_limits<std::int64_t>::min() >> (64 - key_bits);
      const std::int64_t most = -(least + 1);
      next = static_cast<Key>(next < 0 ? least + (next + 20) : most - next);
    }
    if constexpr (std::is_floating_point_v<Key>) {
      if (next == 0 && r.uniform_int(0, 1) == 1)
        next = -0.0;
      else if (step % 7 == 0)
        next += 0.5 * std::numeric_limits<Key>::epsilon() * next; // near-ties
    }
    if (key[uid])
      reference.erase({*key[uid], id});
    if (step % 4 == 1) { // erase instead (an absent id: nothing happens)
      key[uid] = std::nullopt;
      heap.erase(id);
    } else {
      key[uid] = next;
      reference.emplace(next, id);
      heap.set(next, id);
    }
    REQUIRE(heap.size() == reference.size());
    const auto limit = static_cast<std::int32_t>(r.uniform_int(0, 12)); // 0: visits none
    const auto stop_at = id_of(static_cast<std::int32_t>(r.uniform_int(0, 39)));
    std::vector<std::pair<Key, std::int32_t>> seen;
    heap.visit(limit, [&](const auto& e) {
      seen.push_back(e);
      return e.second == stop_at;
    });
    std::vector<std::pair<Key, std::int32_t>> expect;
    for (const auto& e : reference) {
      if (static_cast<std::int32_t>(expect.size()) >= limit)
        break;
      expect.push_back(e);
      if (e.second == stop_at)
        break;
    }
    REQUIRE(seen == expect);
    REQUIRE(heap.top().has_value() == !reference.empty());
    if (!reference.empty())
      CHECK(*heap.top() == *reference.begin());
  }
}
} // namespace

TEST_CASE("indexed_heap: keeps the order of an ordered set of (key, id)") {
  SUBCASE("double keys") {
    check_indexed_heap<double>(29);
  }
  SUBCASE("integer keys") {
    check_indexed_heap<std::int64_t>(31);
    check_indexed_heap<std::int32_t>(37); // 64-bit entries
  }
  SUBCASE("integer keys at the ends of their range") {
    check_indexed_heap<std::int32_t>(41, 32);
    check_indexed_heap<std::int64_t>(43, 64); // 128-bit entries
  }
  SUBCASE("narrowed keys (64-bit entries): levelled's (tokens, group) heap, and ids at the top") {
    using tokens = dcpp::detail::indexed_heap<std::int64_t, 38>;
    check_indexed_heap<std::int64_t, tokens>(47);
    check_indexed_heap<std::int64_t, tokens>(53, 38);
    // 10 id bits: ids 1,023 down to 24 beside keys at both ends
    using few_ids = dcpp::detail::indexed_heap<std::int64_t, 54>;
    check_indexed_heap<std::int64_t, few_ids>(59, 54, 10);
    check_indexed_heap<std::int64_t, few_ids>(61, 0, 10);
  }
}
