// CLI11 checks for the examples' and benchmarks' number options. CLI11's own (PositiveNumber,
// NonNegativeNumber, Range on doubles) let NaN through, since every comparison with NaN is false,
// and name their open bound as DBL_MAX written out in 309 digits; these refuse NaN and the
// infinities and say the bound as it is meant. An unsigned option parsed by CLI11 alone takes -1
// as 2^64 - 1; `unsigned_integer` refuses a sign. `path` refuses an empty path.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace dcpp_cli {

namespace detail {
//! The integer type an option's variable holds (itself, or an optional's value).
template <class V>
struct integer_of {
  using type = V;
};
template <class V>
struct integer_of<std::optional<V>> {
  using type = V;
};
} // namespace detail

namespace detail {
//! A finite number with `ok(value)`; else "'TEXT' is not a finite number WHAT".
template <class Ok>
CLI::Validator finite_number(const std::string& what, Ok ok) {
  return CLI::Validator(
      [what, ok](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) || !ok(value))
          return fmt::format("'{}' is not a finite number {}", text, what);
        return {};
      },
      "FINITE " + what);
}
} // namespace detail

//! A finite number above `low` (e.g. a rate or a learning rate: above 0).
inline CLI::Validator finite_above(double low) {
  return detail::finite_number(fmt::format("> {}", low), [low](double v) { return v > low; });
}

//! A number above 0 that a float holds without turning to 0 or inf: from the smallest normal
//! float to the largest (e.g. a softmax scale, computed in float: 1e300 was 'scale = inf').
inline CLI::Validator positive_float() {
  constexpr float low = std::numeric_limits<float>::min();
  constexpr float high = std::numeric_limits<float>::max();
  return detail::finite_number(fmt::format("> 0 within a float ({} to {})", low, high),
                               [](double v) { return v >= low && v <= high; });
}

//! A finite number of at least `low` (e.g. a time that may be 0).
inline CLI::Validator finite_at_least(double low) {
  return detail::finite_number(fmt::format(">= {}", low), [low](double v) { return v >= low; });
}

//! A finite number from `low` to `high`.
inline CLI::Validator finite_in(double low, double high) {
  return detail::finite_number(fmt::format("from {} to {}", low, high),
                               [low, high](double v) { return v >= low && v <= high; });
}

//! A decimal integer, as every number dcpp reads is: leading zeros are dropped before CLI11
//! converts the text (which reads `016` as octal 14 and `0x10` as 16), anything but an optional
//! sign and digits is refused, and so is a value outside the option's type T (named with its
//! range, where CLI11 said "Could not convert"). Pass the option's variable to take its type:
//! `->transform(dcpp_cli::decimal(world_size))`. Add it before an option's range check, which
//! converts too.
template <class V = std::int64_t>
inline CLI::Validator decimal(const V& /*variable*/ = V{}) {
  using T = typename detail::integer_of<V>::type;
  static_assert(std::is_integral_v<T>);
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
        if (text.size() == sign || text.find_first_not_of("0123456789", sign) != std::string::npos)
          return fmt::format("'{}' is not a decimal integer", text);
        const std::size_t first = text.find_first_not_of('0', sign);
        const std::string digits =
            first == std::string::npos ? std::string("0") : text.substr(first);
        const std::string normal = (sign == 1 && text[0] == '-' ? "-" : "") + digits;
        T value{};
        const auto [at, ec] = std::from_chars(normal.data(), normal.data() + normal.size(), value);
        if (ec != std::errc() || at != normal.data() + normal.size())
          return fmt::format("{} is out of range: the limit is {} to {}", text,
                             std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
        text = normal;
        return {};
      },
      ""); // no word in --help: the option's type already says INT
}

//! A whole number from 0 to 2^64 - 1, digits only (e.g. a seed: CLI11 alone wraps -1 to 2^64 - 1).
inline CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [at, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc() || at != end)
          return fmt::format("'{}' is not an integer from 0 to {}", text,
                             std::numeric_limits<std::uint64_t>::max());
        text = std::to_string(value); // decimal: CLI11 would read a leading 0 as octal
        return {};
      },
      "UINT64");
}

//! A path that names something: an empty one (a script's unset variable) was taken for "none"
//! (`--b ''`: no bias) or for the root (`--out-dir ''`: /y.npy).
inline CLI::Validator path() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? "'' is an empty path; name a file or directory" : "";
      },
      "PATH");
}

} // namespace dcpp_cli
