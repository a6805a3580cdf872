// Sorting sample ids by a computed key, fast: the keys are built once into one array with the
// ids and sorted as values (no indirect lookups inside the comparisons). Keys made of numbers
// (a number, or a pair or tuple of numbers) become order-preserving 64-bit words, spread into
// buckets by their leading bits, large buckets split again by their next bits, and finished by
// comparison (std::sort's mispredicted branches dominate on the pairs); other keys go to
// std::sort. Ties go to the lower id, so the
// order is total and the same on every platform, whichever sort runs.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dcpp {

namespace detail {

template <class T>
inline constexpr bool is_word_number = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

template <class K>
struct word_key_traits {
  static constexpr bool ok = is_word_number<K>;
  static constexpr std::size_t words = 1;
};
template <class... T>
struct word_key_traits<std::tuple<T...>> {
  static constexpr bool ok = (is_word_number<T> && ...);
  static constexpr std::size_t words = sizeof...(T);
};
template <class A, class B>
struct word_key_traits<std::pair<A, B>> {
  static constexpr bool ok = is_word_number<A> && is_word_number<B>;
  static constexpr std::size_t words = 2;
};

//! An unsigned word that orders like `v` (integers by value, floating point by value with
//! -0 == +0; NaN is not a valid key).
template <class T>
std::uint64_t key_word(T v) noexcept {
  constexpr std::uint64_t top = std::uint64_t{1} << 63;
  if constexpr (std::is_floating_point_v<T>) {
    const double d = static_cast<double>(v) + 0.0; // -0 becomes +0: equal keys, equal words
    const auto bits = std::bit_cast<std::uint64_t>(d);
    return (bits & top) != 0 ? ~bits : bits | top;
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v)) ^ top;
  } else {
    return static_cast<std::uint64_t>(v);
  }
}

template <class K>
auto key_words(const K& key) noexcept {
  using traits = word_key_traits<K>;
  std::array<std::uint64_t, traits::words> out{};
  if constexpr (is_word_number<K>) {
    out[0] = key_word(key);
  } else {
    std::apply(
        [&out](const auto&... field) {
          std::size_t i = 0;
          ((out[i++] = key_word(field)), ...);
        },
        key);
  }
  return out;
}

template <std::size_t W>
struct id_record {
  std::array<std::uint64_t, W> key;
  std::int32_t id;
};

template <std::size_t W>
bool record_less(const id_record<W>& x, const id_record<W>& y) noexcept {
  for (std::size_t w = 0; w < W; ++w)
    if (x.key[w] != y.key[w])
      return x.key[w] < y.key[w];
  return x.id < y.id;
}

//! The most significant key word from `word` on that differs between `n` records (W if none),
//! and the bits in which it differs.
template <std::size_t W, class WordOf>
std::pair<std::size_t, std::uint64_t> leading_difference(std::size_t n, std::size_t word,
                                                         WordOf&& word_of) {
  for (std::size_t w = word; w < W; ++w) {
    std::uint64_t differs = 0;
    const std::uint64_t first = word_of(0, w);
    for (std::size_t i = 1; i < n; ++i)
      differs |= word_of(i, w) ^ first;
    if (differs != 0)
      return {w, differs};
  }
  return {W, 0};
}

//! One counting pass of `n` records into `out` by the `bits`-bit digit of word `lead` below
//! `shift`; returns the bucket starts (2^bits + 1 entries).
template <std::size_t W, class RecordOf>
std::vector<std::uint32_t> counting_pass(std::size_t n, std::size_t lead, int shift, int bits,
                                         RecordOf&& record_of, id_record<W>* out) {
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
  std::vector<std::uint32_t> start((std::size_t{1} << bits) + 1, 0);
  for (std::size_t i = 0; i < n; ++i)
    ++start[((record_of(i).key[lead] >> shift) & mask) + 1];
  for (std::size_t d = 1; d < start.size(); ++d)
    start[d] += start[d - 1];
  std::vector<std::uint32_t> next(start.begin(), start.end() - 1);
  for (std::size_t i = 0; i < n; ++i) {
    const id_record<W> r = record_of(i);
    out[next[(r.key[lead] >> shift) & mask]++] = r;
  }
  return start;
}

//! Digit width for `n` records whose leading differing bit is `top`: about one bucket per one
//! to two records (fewer buckets than records: the passes over the bucket table cost as much as
//! the few more comparisons), at least 2^8 buckets, at most 2^16.
inline int digit_bits(std::size_t n, int top) noexcept {
  return std::min(top + 1, std::clamp(static_cast<int>(std::bit_width(n)) - 1, 8, 16));
}

//! Buckets up to this size are finished by comparison: below, a counting pass does not pay.
inline constexpr std::size_t comparison_limit = 256;

//! Sorts the records of one bucket (keys equal in the words before `word` and in the bits its
//! digit covered): by insertion when small, by comparison up to a few hundred, else by another
//! counting pass on the bits below (keys that pile into few buckets, e.g. a first word with few
//! values, are split again rather than compared), or by id when the keys are equal.
template <std::size_t W>
void sort_bucket(id_record<W>* first, std::size_t n, id_record<W>* scratch, std::size_t word) {
  constexpr std::size_t insertion_limit = 16;
  const auto less = [](const id_record<W>& x, const id_record<W>& y) { return record_less(x, y); };
  if (n < 2 || std::is_sorted(first, first + n, less)) // equal keys often arrive in id order
    return;
  if (n <= insertion_limit) {
    for (std::size_t i = 1; i < n; ++i) {
      const id_record<W> r = first[i];
      std::size_t hole = i;
      for (; hole > 0 && less(r, first[hole - 1]); --hole)
        first[hole] = first[hole - 1];
      first[hole] = r;
    }
    return;
  }
  if (n <= comparison_limit) {
    std::sort(first, first + n, less);
    return;
  }
  const auto [lead, differs] = leading_difference<W>(
      n, word, [first](std::size_t i, std::size_t w) { return first[i].key[w]; });
  if (lead == W) { // equal keys: by id
    std::sort(first, first + n, [](const auto& x, const auto& y) { return x.id < y.id; });
    return;
  }
  const int top = 63 - std::countl_zero(differs);
  const int bits = digit_bits(n, top);
  const auto start = counting_pass<W>(
      n, lead, top + 1 - bits, bits, [first](std::size_t i) { return first[i]; }, scratch);
  std::copy(scratch, scratch + n, first);
  for (std::size_t d = 0; d + 1 < start.size(); ++d)
    sort_bucket(first + start[d], start[d + 1] - start[d], scratch + start[d], lead);
}

//! Sorts ids by key words (`words[i]` belongs to `ids[i]`; word 0 is the most significant,
//! all compared as unsigned integers), then by id. One counting pass on the highest bits that
//! differ between the keys spreads the records into about half as many buckets as there are
//! records; each bucket is then finished by `sort_bucket`. The order is total, so the result is the
//! one any correct sort gives.
template <std::size_t W>
void bucket_sort_ids(std::vector<std::int32_t>& ids,
                     const std::vector<std::array<std::uint64_t, W>>& words) {
  const std::size_t n = ids.size();
  const auto [lead, differs] =
      leading_difference<W>(n, 0, [&words](std::size_t i, std::size_t w) { return words[i][w]; });
  if (lead == W) { // equal keys: by id
    std::sort(ids.begin(), ids.end());
    return;
  }
  const int top = 63 - std::countl_zero(differs);
  const int bits = digit_bits(n, top);
  // bits above `top` are the same in every key, so the digit orders like the key
  std::vector<id_record<W>> sorted(n);
  const auto start = counting_pass<W>(
      n, lead, top + 1 - bits, bits,
      [&](std::size_t i) {
        return id_record<W>{words[i], ids[i]};
      },
      sorted.data());
  std::vector<id_record<W>> scratch;
  for (std::size_t d = 0; d + 1 < start.size(); ++d) {
    const std::size_t size = start[d + 1] - start[d];
    if (size < 2)
      continue;
    if (scratch.empty() && size > comparison_limit) // only a counting pass needs it
      scratch.resize(n);
    sort_bucket(sorted.data() + start[d], size, scratch.data() + start[d], lead);
  }
  for (std::size_t i = 0; i < n; ++i)
    ids[i] = sorted[i].id;
}

} // namespace detail

//! Sorts `ids` (non-negative) ascending by `key(id)` (any type with `<`, e.g. a tuple compared
//! lexicographically; negate a field to sort it descending), then by id.
template <class Key>
void sort_ids_by_key(std::vector<std::int32_t>& ids, Key&& key) {
  using K = decltype(key(std::int32_t{}));
  // below a few hundred ids the bucket pass's fixed cost (>= 256 buckets) is not worth it
  constexpr std::size_t buckets_from = 256;
  if constexpr (detail::word_key_traits<K>::ok) {
    if (ids.size() >= buckets_from && ids.size() < (std::size_t{1} << 32)) {
      std::vector<std::array<std::uint64_t, detail::word_key_traits<K>::words>> words;
      words.reserve(ids.size());
      for (const std::int32_t id : ids)
        words.push_back(detail::key_words(key(id)));
      detail::bucket_sort_ids(ids, words);
      return;
    }
  }
  std::vector<std::pair<K, std::int32_t>> keyed;
  keyed.reserve(ids.size());
  for (const std::int32_t id : ids)
    keyed.emplace_back(key(id), id);
  std::sort(keyed.begin(), keyed.end());
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = keyed[i].second;
}

} // namespace dcpp
