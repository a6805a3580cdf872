// Partition helpers of THD ring attention: from the group's cu_seqlens (real and padded, every
// padded length a multiple of 2*cp) and a rank, the rank's local geometry (offsets, real rows of
// each zigzag half, its own and any other group rank's), the index maps between the full and the
// per-rank layouts, the work lists (tiles) of the kernels, and the gather/scatter between a full
// [tokens, width] buffer and the rank's buffer (the kernels' own source, through the host
// launcher).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/core/zigzag.hpp"
#include "dcpp/error.hpp"
#include "dcpp/kernels/attention/ring_attention.hpp" // kernels/dcpp/kernels/attention/: the kernel bodies
#include "dcpp/route/fields.hpp"
#include "dcpp/simt/host_launcher.hpp"

namespace dcpp {

//! Which rows of each local sequence a work list covers.
enum class attention_rows { all, first_half, second_half };

//! The query rows a ring step computes (and merges): the second halves on upper steps, else all.
constexpr attention_rows query_rows_of(kernels::ring_step_kind kind) noexcept {
  return kind == kernels::ring_step_kind::upper ? attention_rows::second_half : attention_rows::all;
}
//! The key rows a ring step reads: the first halves on lower steps, else all.
constexpr attention_rows key_rows_of(kernels::ring_step_kind kind) noexcept {
  return kind == kernels::ring_step_kind::lower ? attention_rows::first_half : attention_rows::all;
}

//! An owning work list (see kernels::attention_tiles).
struct attention_tile_list {
  std::vector<std::int32_t> seq, begin, end;
  [[nodiscard]] int count() const noexcept { return static_cast<int>(seq.size()); }
  [[nodiscard]] kernels::attention_tiles view() const noexcept {
    return {seq.data(), begin.data(), end.data(), count()};
  }
};

//! Cumulative lengths padded to multiples of 2*cp (what the router's layouts hold).
inline std::vector<std::int32_t> pad_cu_seqlens(std::span<const std::int32_t> cu_seqlens, int cp) {
  std::vector<std::int32_t> out{0};
  for (std::size_t i = 1; i < cu_seqlens.size(); ++i) {
    const std::int64_t length = cu_seqlens[i] - cu_seqlens[i - 1];
    const std::int64_t unit = 2 * static_cast<std::int64_t>(cp);
    out.push_back(static_cast<std::int32_t>(out.back() + (length + unit - 1) / unit * unit));
  }
  return out;
}

//! One rank's view of a CP group's packed batch.
class ring_partition {
public:
  //! `cu_seqlens` real, `cu_seqlens_padded` padded (both int32, from 0, one entry per sample plus
  //! one); `cp` the group size, `rank` the rank in the group. Throws naming the sample and values
  //! when a padded length is not a multiple of 2*cp or is below the real length.
  ring_partition(std::vector<std::int32_t> cu_seqlens, std::vector<std::int32_t> cu_seqlens_padded,
                 int cp, int rank)
      : cp_(cp), rank_(rank), cu_(std::move(cu_seqlens)), cu_padded_(std::move(cu_seqlens_padded)) {
    if (cp < 1)
      throw error(status_code::invalid_option,
                  fmt::format("ring attention: cp = {} must be >= 1", cp));
    if (rank < 0 || rank >= cp)
      throw error(
          status_code::invalid_option,
          fmt::format("ring attention: rank {} is outside the group of {} ranks", rank, cp));
    if (cu_.empty() || cu_[0] != 0 || cu_padded_.size() != cu_.size() || cu_padded_[0] != 0)
      throw error(status_code::invalid_length,
                  fmt::format("ring attention: cu_seqlens ({} entries) and cu_seqlens_padded ({} "
                              "entries) must have the same size and start with 0",
                              cu_.size(), cu_padded_.size()));
    const int n = sequences();
    offset_.assign(1, 0);
    for (int s = 0; s < n; ++s) {
      const std::int64_t real = cu_[s + 1] - cu_[s], padded = cu_padded_[s + 1] - cu_padded_[s];
      if (real < 0 || padded < real || padded % (2 * cp) != 0)
        throw error(status_code::invalid_length,
                    fmt::format("ring attention: sample {} has {} real and {} padded tokens; the "
                                "padded length must be a multiple of 2*cp = {} and at least the "
                                "real one",
                                s, real, padded, 2 * cp));
      offset_.push_back(static_cast<std::int32_t>(offset_.back() + padded / cp));
    }
    own_real_ = real_of(rank);
    source_row_.assign(static_cast<std::size_t>(tokens()), -1);
    padded_row_.assign(static_cast<std::size_t>(tokens()), -1);
    for (int s = 0; s < n; ++s) {
      const std::int64_t padded = cu_padded_[s + 1] - cu_padded_[s], real = cu_[s + 1] - cu_[s];
      for (std::int64_t j = 0; j < padded / cp; ++j) {
        const std::int64_t pos = zigzag_position(padded, cp, rank, j);
        const auto at = static_cast<std::size_t>(offset_[s] + j);
        padded_row_[at] = cu_padded_[s] + pos;
        if (pos < real)
          source_row_[at] = cu_[s] + pos;
      }
    }
  }

  //! From a router layout (the group's samples in buffer order).
  static ring_partition from(const thd_layout& t) {
    if (t.idle())
      throw error(status_code::invalid_option,
                  "ring attention: the rank is idle in this micro-batch");
    return ring_partition(t.cu_seqlens, t.cu_seqlens_padded, t.cp, t.rank_in_group);
  }
  //! From real cu_seqlens, padding every sample to a multiple of 2*cp.
  static ring_partition padded(std::vector<std::int32_t> cu_seqlens, int cp, int rank) {
    auto p = pad_cu_seqlens(std::span<const std::int32_t>(cu_seqlens), cp);
    return ring_partition(std::move(cu_seqlens), std::move(p), cp, rank);
  }

  [[nodiscard]] int cp() const noexcept { return cp_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int sequences() const noexcept { return static_cast<int>(cu_.size()) - 1; }
  //! Rows of this rank's buffer (padding included): cu_seqlens_padded.back() / cp.
  [[nodiscard]] std::int64_t tokens() const noexcept { return offset_.back(); }
  [[nodiscard]] const std::vector<std::int32_t>& cu_seqlens() const noexcept { return cu_; }
  [[nodiscard]] const std::vector<std::int32_t>& cu_seqlens_padded() const noexcept {
    return cu_padded_;
  }
  //! Local cu_seqlens: first row of each sequence in the rank's buffer (same on every rank).
  [[nodiscard]] const std::vector<std::int32_t>& offsets() const noexcept { return offset_; }
  //! Real rows of each half ([2 * sequences]) of this rank's buffer.
  [[nodiscard]] const std::vector<std::int32_t>& own_real() const noexcept { return own_real_; }
  //! Real rows of each half of group rank `owner`'s buffer (the K/V it sends round the ring).
  [[nodiscard]] std::vector<std::int32_t> real_of(int owner) const {
    std::vector<std::int32_t> out;
    out.reserve(2 * static_cast<std::size_t>(sequences()));
    for (int s = 0; s < sequences(); ++s) {
      const std::int64_t real = cu_[s + 1] - cu_[s], padded = cu_padded_[s + 1] - cu_padded_[s];
      for (int half = 0; half < 2; ++half)
        out.push_back(static_cast<std::int32_t>(
            zigzag_real_in_chunk(real, padded, cp_, zigzag_chunk_index(cp_, owner, half))));
    }
    return out;
  }
  //! Per local row: its row in the full unpadded buffer (cu_seqlens order), -1 on padding.
  [[nodiscard]] const std::vector<std::int64_t>& source_rows() const noexcept {
    return source_row_;
  }
  //! Per local row: its row in the full padded buffer (cu_seqlens_padded order).
  [[nodiscard]] const std::vector<std::int64_t>& padded_rows() const noexcept {
    return padded_row_;
  }

  //! Work list of `rows` of every local sequence in tiles of at most `tile` rows.
  [[nodiscard]] attention_tile_list tiles(int tile, attention_rows rows) const {
    attention_tile_list t;
    for (int s = 0; s < sequences(); ++s) {
      const int len = offset_[s + 1] - offset_[s];
      const int lo = rows == attention_rows::second_half ? len / 2 : 0;
      const int hi = rows == attention_rows::first_half ? len / 2 : len;
      for (int b = lo; b < hi; b += tile) {
        t.seq.push_back(s);
        t.begin.push_back(offset_[s] + b);
        t.end.push_back(offset_[s] + (b + tile < hi ? b + tile : hi));
      }
    }
    return t;
  }

private:
  int cp_ = 1, rank_ = 0;
  std::vector<std::int32_t> cu_, cu_padded_, offset_, own_real_;
  std::vector<std::int64_t> source_row_, padded_row_;
};

//! The rank's rows of a full unpadded buffer [cu_seqlens.back(), width]: local [tokens, width],
//! padding rows set to `fill`. Runs the gather kernel through the host launcher.
template <class T>
void partition_gather_on_host(const ring_partition& part, std::span<const T> full,
                              std::span<T> local, int width, T fill = from_float<T>(0.0f)) {
  const std::int64_t n = part.tokens() * width;
  if (std::ssize(local) != n ||
      std::ssize(full) != static_cast<std::int64_t>(part.cu_seqlens().back()) * width)
    throw error(status_code::invalid_length,
                fmt::format("partition gather: full buffer of {} and local buffer of {} elements; "
                            "expected {} and {} for width {}",
                            full.size(), local.size(),
                            static_cast<std::int64_t>(part.cu_seqlens().back()) * width, n, width));
  if (n == 0)
    return;
  const auto* map = part.source_rows().data();
  simt::host_launch({{static_cast<unsigned>((n + 255) / 256)}, {256}, 0},
                    [&](simt::host_context& ctx) {
                      kernels::partition_gather_body(ctx, full.data(), map, local.data(),
                                                     part.tokens(), width, fill);
                    });
}

//! Writes the rank's real rows of `local` into the full unpadded buffer.
template <class T>
void partition_scatter_on_host(const ring_partition& part, std::span<const T> local,
                               std::span<T> full, int width) {
  const std::int64_t n = part.tokens() * width;
  if (std::ssize(local) != n ||
      std::ssize(full) != static_cast<std::int64_t>(part.cu_seqlens().back()) * width)
    throw error(status_code::invalid_length,
                fmt::format("partition scatter: local buffer of {} and full buffer of {} elements; "
                            "expected {} and {} for width {}",
                            local.size(), full.size(), n,
                            static_cast<std::int64_t>(part.cu_seqlens().back()) * width, width));
  if (n == 0)
    return;
  const auto* map = part.source_rows().data();
  simt::host_launch(
      {{static_cast<unsigned>((n + 255) / 256)}, {256}, 0}, [&](simt::host_context& ctx) {
        kernels::partition_scatter_body(ctx, local.data(), map, full.data(), part.tokens(), width);
      });
}

} // namespace dcpp
