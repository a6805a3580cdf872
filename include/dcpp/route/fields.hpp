// Token payloads: the field concept, the standard fields, a rank's shard of samples and the
// packed THD micro-batch the router builds from the shards.
#pragma once

#include <concepts>
#include <cstdint>
#include <numeric>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/error.hpp"

namespace dcpp {

//! A per-token payload field: its element type, a name (for error messages) and the value that
//! padding tokens carry. Users add their own fields (e.g. multimodal positions, rewards).
template <class F>
concept payload_field = requires {
  typename F::value_type;
  { F::name } -> std::convertible_to<std::string_view>;
  { F::padding } -> std::convertible_to<typename F::value_type>;
}
&&transferable<typename F::value_type>;

namespace fields {
//! Input token ids; padding is token 0.
struct token_ids {
  using value_type = std::int32_t;
  static constexpr std::string_view name = "token_ids";
  static constexpr value_type padding = 0;
};
//! Target ids; padding is -100 (the usual ignore index).
struct labels {
  using value_type = std::int32_t;
  static constexpr std::string_view name = "labels";
  static constexpr value_type padding = -100;
};
//! 1 where the token counts in the loss; padding carries 0.
struct loss_mask {
  using value_type = std::uint8_t;
  static constexpr std::string_view name = "loss_mask";
  static constexpr value_type padding = 0;
};
} // namespace fields
static_assert(payload_field<fields::token_ids> && payload_field<fields::labels> &&
              payload_field<fields::loss_mask>);

namespace detail {
template <class F, class... Fields>
inline constexpr std::size_t field_index = [] {
  constexpr bool same[] = {std::is_same_v<F, Fields>...};
  for (std::size_t i = 0; i < sizeof...(Fields); ++i)
    if (same[i])
      return i;
  return sizeof...(Fields);
}();
} // namespace detail

//! One vector per field (`values`, in the order of `Fields`), reached by tag: `get<F>()`.
template <payload_field... Fields>
struct field_columns {
  std::tuple<std::vector<typename Fields::value_type>...> values;

  template <payload_field F>
  [[nodiscard]] auto& get() noexcept {
    static_assert(detail::field_index<F, Fields...> < sizeof...(Fields), "field not among Fields");
    return std::get<detail::field_index<F, Fields...>>(values);
  }
  template <payload_field F>
  [[nodiscard]] const auto& get() const noexcept {
    static_assert(detail::field_index<F, Fields...> < sizeof...(Fields), "field not among Fields");
    return std::get<detail::field_index<F, Fields...>>(values);
  }
};

//! The samples a rank holds before routing (its data-loader shard): sample lengths and, per
//! field, the tokens of all its samples back to back (sample order, `sum(lengths)` values).
template <payload_field... Fields>
struct token_shard : field_columns<Fields...> {
  std::vector<std::int64_t> lengths;

  [[nodiscard]] std::int64_t tokens() const noexcept {
    return std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  }

  //! Every length positive and every field holding exactly `tokens()` values.
  [[nodiscard]] status check() const;
};

namespace detail {
//! `token_shard::check` for the fields `Named` only: every length positive, each named field
//! holding `tokens()` values (what a route that carries those fields needs).
template <payload_field... Named, class Shard>
[[nodiscard]] status check_shard_fields(const Shard& shard) {
  for (std::size_t i = 0; i < shard.lengths.size(); ++i)
    if (shard.lengths[i] < 1)
      return status::failure(
          status_code::invalid_length,
          fmt::format("local sample {} has length {}; lengths must be >= 1", i, shard.lengths[i]),
          static_cast<std::int64_t>(i));
  const std::int64_t expected = shard.tokens();
  status result = status::success();
  const auto check_one = [&](std::string_view name, std::size_t size) {
    if (result.ok() && static_cast<std::int64_t>(size) != expected)
      result = status::failure(status_code::invalid_length,
                               fmt::format("field '{}' holds {} values, expected {} (the sum of "
                                           "the {} local sample lengths)",
                                           name, size, expected, shard.lengths.size()));
  };
  (check_one(Named::name, shard.template get<Named>().size()), ...);
  return result;
}
} // namespace detail

template <payload_field... Fields>
status token_shard<Fields...>::check() const {
  return detail::check_shard_fields<Fields...>(*this);
}

//! Where one micro-batch puts a rank: its CP group and the samples of its packed buffer.
//! `cu_seqlens` and `cu_seqlens_padded` are over whole samples (int32, as attention kernels take
//! them); this rank holds `(cu_seqlens_padded[i+1] - cu_seqlens_padded[i]) / cp` tokens of
//! sample i, starting at `cu_seqlens_padded[i] / cp` of its buffer (zigzag chunks r, 2cp-1-r).
struct thd_layout {
  std::int32_t first_rank = -1; //!< first rank of the group; -1 when idle
  std::int32_t cp = 0;          //!< group size; 0 when idle
  std::int32_t rank_in_group = -1;
  std::vector<std::int32_t> samples;              //!< global sample ids, buffer order
  std::vector<std::int32_t> cu_seqlens{0};        //!< real lengths, cumulative (n+1)
  std::vector<std::int32_t> cu_seqlens_padded{0}; //!< padded lengths, cumulative (n+1)

  [[nodiscard]] bool idle() const noexcept { return cp == 0; }
  //! Tokens of this rank's buffer (padding included).
  [[nodiscard]] std::int64_t tokens() const noexcept {
    return cp == 0 ? 0 : cu_seqlens_padded.back() / cp;
  }
  friend bool operator==(const thd_layout&, const thd_layout&) = default;
};

//! One rank's packed buffer for one micro-batch: the layout, per-token positions inside their
//! sample (restarting at 0 per sample, zigzag order; padding continues past the real length),
//! a real-token marker (0 on padding) and the routed field values (padding carries
//! `Field::padding`).
template <payload_field... Fields>
struct thd_batch : field_columns<Fields...> {
  thd_layout layout;
  std::vector<std::int64_t> position_ids;
  std::vector<std::uint8_t> is_real;
  [[nodiscard]] std::int64_t tokens() const noexcept { return layout.tokens(); }
};

} // namespace dcpp
