// The per-token work of the device router, as Thrust algorithms under an execution policy:
// gathers into and scatters out of an all-to-all byte buffer through index maps, local copies,
// fills and the THD geometry (positions, real-token markers). Values move as words of their size
// (a field's type only matters for its size), so one instantiation per policy serves every field.
// Device-safe: no fmt, no communicator; `thrust::cpp::par` on host memory in the tests,
// `thrust::cuda::par_nosync.on(stream)` on device memory behind `cuda_route_ops`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "dcpp/core/config.hpp"
#include "dcpp/core/zigzag.hpp"
#include "dcpp/route/route_ops_maps.hpp"

namespace dcpp {

namespace detail {
//! A value of N bytes moved as one word (1, 2, 4, 8: the unsigned type; else bytes).
template <std::size_t N>
struct route_word {
  unsigned char bytes[N];
};
template <>
struct route_word<1> {
  std::uint8_t v;
};
template <>
struct route_word<2> {
  std::uint16_t v;
};
template <>
struct route_word<4> {
  std::uint32_t v;
};
template <>
struct route_word<8> {
  std::uint64_t v;
};

template <class W>
struct pack_words {
  const std::int64_t* source;
  const std::int32_t* peer;
  const std::int64_t* slot;
  const std::int64_t* offset; // bytes, per peer
  const W* values;
  std::byte* buffer;
  DCPP_HOST_DEVICE void operator()(std::int64_t k) const {
    reinterpret_cast<W*>(buffer + offset[peer[k]])[slot[k]] = values[source[k]];
  }
};
template <class W>
struct unpack_words {
  const std::int64_t* dest;
  const std::int32_t* peer;
  const std::int64_t* slot;
  const std::int64_t* offset;
  const std::byte* buffer;
  W* values;
  DCPP_HOST_DEVICE void operator()(std::int64_t k) const {
    values[dest[k]] = reinterpret_cast<const W*>(buffer + offset[peer[k]])[slot[k]];
  }
};
template <class W>
struct copy_words {
  const std::int64_t* from;
  const std::int64_t* to;
  const W* source;
  W* dest;
  DCPP_HOST_DEVICE void operator()(std::int64_t k) const { dest[to[k]] = source[from[k]]; }
};
//! Element i of rows of `width` values: dest[to_row[r] + e] = (or += when `Add`)
//! source[from_row[r] + e].
template <class W, bool Add = false>
struct row_values {
  std::int64_t width;
  const std::int64_t* from_row;
  const std::int64_t* to_row;
  const W* source;
  W* dest;
  DCPP_HOST_DEVICE void operator()(std::int64_t i) const {
    const std::int64_t r = i / width;
    const std::int64_t e = i - r * width;
    if constexpr (Add)
      dest[to_row[r] + e] += source[from_row[r] + e];
    else
      dest[to_row[r] + e] = source[from_row[r] + e];
  }
};
template <class W>
struct fill_words {
  W value;
  W* dest;
  DCPP_HOST_DEVICE void operator()(std::int64_t k) const { dest[k] = value; }
};

//! Position in its sample and real-token marker of buffer token t (zigzag order).
struct thd_geometry {
  const std::int32_t* cu_padded; // samples + 1
  const std::int32_t* cu;        // samples + 1
  std::int32_t samples;
  std::int32_t cp;
  std::int32_t rank;
  std::int64_t* positions;
  std::uint8_t* real;
  DCPP_HOST_DEVICE void operator()(std::int64_t t) const {
    std::int32_t lo = 0, hi = samples - 1; // the last sample whose rank-local range starts <= t
    while (lo < hi) {
      const std::int32_t mid = lo + (hi - lo + 1) / 2;
      if (cu_padded[mid] / cp <= t)
        lo = mid;
      else
        hi = mid - 1;
    }
    const std::int64_t padded = std::int64_t{cu_padded[lo + 1]} - cu_padded[lo];
    const std::int64_t position = zigzag_position(padded, cp, rank, t - cu_padded[lo] / cp);
    positions[t] = position;
    real[t] = position < std::int64_t{cu[lo + 1]} - cu[lo] ? 1 : 0;
  }
};
} // namespace detail

//! The device router's operations under Thrust execution policy `Policy`, on raw pointers into
//! the policy's memory; `bytes` is the size of one value. Values of other sizes than 1, 2, 4, 8
//! and 16 bytes are refused by the router before any call.
template <class Policy>
struct thrust_route_ops {
  Policy policy;

  //! buffer[block of peer[k]][slot[k]] = values[index[k]] for every token k.
  void pack(std::size_t bytes, const route_ops_maps& m, const void* values, std::byte* buffer) {
    by_size(bytes, [&]<class W>() {
      run(m.tokens, detail::pack_words<W>{m.index, m.peer, m.slot, m.offset,
                                          static_cast<const W*>(values), buffer});
    });
  }
  //! values[index[k]] = buffer[block of peer[k]][slot[k]] for every token k.
  void unpack(std::size_t bytes, const route_ops_maps& m, const std::byte* buffer, void* values) {
    by_size(bytes, [&]<class W>() {
      run(m.tokens, detail::unpack_words<W>{m.index, m.peer, m.slot, m.offset, buffer,
                                            static_cast<W*>(values)});
    });
  }
  //! dest[to[k]] = source[from[k]] for k < n.
  void copy(std::size_t bytes, std::int64_t n, const std::int64_t* from, const std::int64_t* to,
            const void* source, void* dest) {
    by_size(bytes, [&]<class W>() {
      run(n, detail::copy_words<W>{from, to, static_cast<const W*>(source), static_cast<W*>(dest)});
    });
  }
  //! Rows of `width` values: dest[to_row[r] + e] = source[from_row[r] + e] for r < rows,
  //! e < width (row starts in values).
  void copy_rows(std::size_t bytes, std::int64_t rows, std::int64_t width,
                 const std::int64_t* from_row, const std::int64_t* to_row, const void* source,
                 void* dest) {
    by_size(bytes, [&]<class W>() {
      run(rows * width,
          detail::row_values<W>{width, from_row, to_row, static_cast<const W*>(source),
                                static_cast<W*>(dest)});
    });
  }
  //! Rows as `copy_rows`, added: dest[to_row[r] + e] += source[from_row[r] + e] (`T`
  //! arithmetic; no two rows may share a destination).
  template <class T>
  requires std::is_arithmetic_v<T>
  void add_rows(std::int64_t rows, std::int64_t width, const std::int64_t* from_row,
                const std::int64_t* to_row, const T* source, T* dest) {
    run(rows * width, detail::row_values<T, true>{width, from_row, to_row, source, dest});
  }
  //! dest[k] = *value (a host value of `bytes` bytes) for k < n.
  void fill(std::size_t bytes, std::int64_t n, const void* value, void* dest) {
    by_size(bytes, [&]<class W>() {
      W w;
      std::memcpy(&w, value, sizeof(W));
      run(n, detail::fill_words<W>{w, static_cast<W*>(dest)});
    });
  }
  //! Positions and real-token markers of a rank's `tokens` buffer tokens (`cu_padded` and `cu`:
  //! `samples + 1` entries in the policy's memory).
  void geometry(std::int64_t tokens, const std::int32_t* cu_padded, const std::int32_t* cu,
                std::int32_t samples, std::int32_t cp, std::int32_t rank, std::int64_t* positions,
                std::uint8_t* real) {
    run(tokens, detail::thd_geometry{cu_padded, cu, samples, cp, rank, positions, real});
  }

  //! Whether values of `bytes` bytes can move (1, 2, 4, 8 or 16).
  [[nodiscard]] static constexpr bool movable(std::size_t bytes) noexcept {
    return route_movable(bytes);
  }

private:
  template <class Fn>
  void run(std::int64_t n, Fn fn) {
    if (n > 0)
      thrust::for_each(policy, thrust::counting_iterator<std::int64_t>(0),
                       thrust::counting_iterator<std::int64_t>(n), fn);
  }
  template <class F>
  static void by_size(std::size_t bytes, F&& f) {
    switch (bytes) {
    case 1: f.template operator()<detail::route_word<1>>(); break;
    case 2: f.template operator()<detail::route_word<2>>(); break;
    case 4: f.template operator()<detail::route_word<4>>(); break;
    case 8: f.template operator()<detail::route_word<8>>(); break;
    case 16: f.template operator()<detail::route_word<16>>(); break;
    default: break; // refused by the router
    }
  }
};

} // namespace dcpp
