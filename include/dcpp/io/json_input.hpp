// Parsing JSON input with limits and describing a value in an error without dumping it: a value
// nested thousands deep (or a megabyte string) in a hostile file must give a one-line error, not
// a stack overflow in the message.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dcpp/error.hpp"

namespace dcpp::detail {

//! The deepest nesting any dcpp document needs is 5 (plan: microbatches, groups, samples);
//! this leaves room for users' own fields beside them.
inline constexpr int max_json_depth = 64;

//! How many characters of a piece of input an error message quotes (`quoted_text`).
inline constexpr std::size_t quoted_characters = 40;

//! A piece of input as an error message quotes it, between `quote`s: a control byte as \xNN,
//! and past `quoted_characters` UTF-8 characters, the first of them and how many there are, so a
//! binary file or a line of a megabyte gives a one-line error (a cut never splits a character).
inline std::string quoted_text(std::string_view text, char quote) {
  const auto starts_character = [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  };
  const auto characters =
      static_cast<std::size_t>(std::count_if(text.begin(), text.end(), starts_character));
  std::string out(1, quote);
  std::size_t seen = 0;
  for (const char c : text) {
    if (starts_character(c) && seen++ == quoted_characters)
      break;
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7F)
      out += fmt::format("\\x{:02x}", byte);
    else
      out += c;
  }
  if (characters <= quoted_characters)
    return out + quote;
  return fmt::format("{}...{} ({} characters)", out, quote, characters);
}

//! `text` without a leading UTF-8 byte order mark (editors on Windows write one; it is not
//! part of the first value).
inline std::string_view without_bom(std::string_view text) {
  return text.substr(0, 3) == "\xEF\xBB\xBF" ? text.substr(3) : text;
}

//! A short description of `j` for an error message: scalars as written (strings cut as
//! `quoted_text` cuts them), containers by kind and size.
inline std::string describe_json(const nlohmann::json& j) {
  if (j.is_array())
    return fmt::format("an array ({} elements)", j.size());
  if (j.is_object())
    return fmt::format("an object ({} fields)", j.size());
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    return s.size() <= quoted_characters ? j.dump() : quoted_text(s, '"');
  }
  return j.dump();
}

//! `j` as the integer type T when it is an integer in T's range, else nothing.
template <class T>
bool json_integer(const nlohmann::json& j, T& out) {
  static_assert(std::is_integral_v<T>);
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))
      return false;
    out = static_cast<T>(v);
    return true;
  }
  if (j.is_number_integer()) {
    const auto v = j.get<std::int64_t>();
    if (v < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        (v > 0 &&
         static_cast<std::uint64_t>(v) > static_cast<std::uint64_t>(std::numeric_limits<T>::max())))
      return false;
    out = static_cast<T>(v);
    return true;
  }
  return false;
}

//! Parses `text`; errors (not JSON, nested deeper than max_json_depth, a key twice in one
//! object) name `source`. A repeated key is refused: JSON leaves its meaning open, and a reader
//! that kept one of the two values would plan what the file does not say.
inline nlohmann::json parse_json(std::string_view text, std::string_view source) {
  bool too_deep = false;
  std::optional<std::string> repeated;
  std::vector<std::set<std::string>> keys; // per open object, its keys so far
  const nlohmann::json::parser_callback_t limit =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using event_t = nlohmann::json::parse_event_t;
        if (depth > max_json_depth)
          too_deep = true;
        if (event == event_t::object_start)
          keys.emplace_back();
        else if (event == event_t::object_end && !keys.empty())
          keys.pop_back();
        else if (event == event_t::key && !keys.empty() && !repeated &&
                 !keys.back().insert(parsed.get<std::string>()).second)
          repeated = parsed.get<std::string>();
        return !too_deep && !repeated;
      };
  try {
    nlohmann::json j = nlohmann::json::parse(text, limit);
    if (too_deep)
      throw error(status_code::parse_error,
                  fmt::format("{}: JSON nested deeper than {} levels", source, max_json_depth));
    if (repeated)
      throw error(status_code::parse_error, fmt::format("{}: key {} appears twice in one object",
                                                        source, quoted_text(*repeated, '\'')));
    return j;
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number past double's range (1e999)
    throw error(status_code::parse_error, fmt::format("{}: not valid JSON ({})", source, e.what()));
  }
}

} // namespace dcpp::detail
