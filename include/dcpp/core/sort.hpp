// Sorting sample ids by a computed key, fast: the keys are built once into one array with the
// ids and sorted as values (no indirect lookups inside the comparisons). Ties go to the lower
// id, so the order is total and the same on every platform.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace dcpp {

//! Sorts `ids` ascending by `key(id)` (any type with `<`, e.g. a tuple compared
//! lexicographically; negate a field to sort it descending), then by id.
template <class Key>
void sort_ids_by_key(std::vector<std::int32_t>& ids, Key&& key) {
  using K = decltype(key(std::int32_t{}));
  std::vector<std::pair<K, std::int32_t>> keyed;
  keyed.reserve(ids.size());
  for (const std::int32_t id : ids)
    keyed.emplace_back(key(id), id);
  std::sort(keyed.begin(), keyed.end());
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = keyed[i].second;
}

} // namespace dcpp
