// Reading a batch of sample lengths (text or JSON) and calibration rows (CSV), with errors that
// name the line or the field.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <istream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dcpp/error.hpp"
#include "dcpp/io/json_input.hpp"
#include "dcpp/planner/calibrated_cost.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp {

//! A batch as read from a file: the lengths and the settings a JSON workload may carry.
struct batch_input {
  std::string name;
  std::vector<std::int64_t> lengths;
  std::optional<std::int32_t> world_size; //!< JSON `total_gpus` or `world_size`
  std::optional<std::int64_t>
      max_tokens_per_rank;            //!< JSON `max_seq_len_per_rank` or `max_tokens_per_rank`
  std::optional<std::int32_t> min_cp; //!< JSON `min_cp_size`
  std::optional<std::int32_t> microbatch_multiple; //!< JSON `vpp_microbatch_group_size`
};

//! The most bytes a batch's input may hold where a program reads one (dcpp-plan): 64 per sample
//! at `max_batch_samples` (a length, its comment and its line end), so that an endless stream
//! is refused after 1 GiB instead of filling the memory.
inline constexpr std::int64_t batch_input_limit = max_batch_samples * 64; // 2^30

//! The most bytes a calibration CSV may hold: a million rows of 64 bytes, far past the few
//! hundred a calibration measures, so that an endless stream (`<(yes 4096,1,0.3)`) is refused
//! after 64 MiB instead of filling the memory.
inline constexpr std::int64_t calibration_input_limit = std::int64_t{1} << 26;

namespace detail {
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

inline std::optional<std::int64_t> parse_integer(std::string_view s) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size())
    return std::nullopt;
  return value;
}

//! The first of `keys` present (and not null) in `j`: an integer from 1 to `limit` (the planner's
//! limit for the option it sets, so an error names the input's field, not the option's).
template <class T>
std::optional<T> optional_integer(const nlohmann::json& j, std::string_view source,
                                  std::initializer_list<const char*> keys, T limit) {
  for (const char* key : keys) {
    if (!j.contains(key) || j[key].is_null())
      continue;
    T value{};
    if (!json_integer(j[key], value) || value <= 0 || value > limit)
      throw error(status_code::parse_error,
                  fmt::format("{}: field '{}' = {} must be an integer from 1 to {}", source, key,
                              describe_json(j[key]), limit));
    return value;
  }
  return std::nullopt;
}
} // namespace detail

//! The fields a JSON workload may hold: `seqlens` and the planning settings, and three that
//! describe it and are not read (`description`, `seed`, `pad_multiple`: the shared workloads'
//! provenance).
inline constexpr std::string_view workload_fields[] = {"seqlens",
                                                       "total_gpus",
                                                       "world_size",
                                                       "max_seq_len_per_rank",
                                                       "max_tokens_per_rank",
                                                       "min_cp_size",
                                                       "vpp_microbatch_group_size",
                                                       "name",
                                                       "description",
                                                       "seed",
                                                       "pad_multiple"};

//! `workload_fields` as a list for messages.
inline std::string workload_field_names() {
  std::string out;
  for (const std::string_view f : workload_fields)
    out += fmt::format("{}{}", out.empty() ? "" : ", ", f);
  return out;
}

//! Text: one positive integer length per line; `#` starts a comment; blank lines are skipped.
//! JSON (first non-blank character `{`): an object with a `seqlens` array; `total_gpus`,
//! `max_seq_len_per_rank`, `min_cp_size`, `vpp_microbatch_group_size` and `name` may sit beside
//! it. A leading UTF-8 byte order mark is skipped. At most `max_batch_samples` lengths. Throws
//! dcpp::error naming the line (text) or the array index (JSON).
inline batch_input read_batch(std::istream& in, std::string_view source) {
  const std::string content{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string_view text = detail::without_bom(content);
  batch_input batch;
  batch.name = std::string(source);
  const auto start = text.find_first_not_of(" \t\r\n");
  if (start != std::string::npos && text[start] == '{') {
    const nlohmann::json j = detail::parse_json(text, source);
    // a field dcpp does not know is refused, not ignored: a typo ("total_gpu") would plan with
    // the default in silence
    for (const auto& [key, value] : j.items())
      if (std::find(std::begin(workload_fields), std::end(workload_fields), key) ==
          std::end(workload_fields))
        throw error(status_code::parse_error,
                    fmt::format("{}: unknown field {}; the fields are {}", source,
                                detail::quoted_text(key, '\''), workload_field_names()));
    if (!j.contains("seqlens"))
      throw error(status_code::parse_error,
                  fmt::format("{}: missing array field 'seqlens'", source));
    if (!j["seqlens"].is_array())
      throw error(status_code::parse_error,
                  fmt::format("{}: field 'seqlens' = {} must be an array of lengths", source,
                              detail::describe_json(j["seqlens"])));
    const auto& seqlens = j["seqlens"];
    if (std::cmp_greater(seqlens.size(), max_batch_samples))
      throw error(status_code::invalid_length,
                  fmt::format("{}: seqlens holds {} lengths; the limit is {} samples", source,
                              seqlens.size(), max_batch_samples),
                  max_batch_samples);
    for (std::size_t i = 0; i < seqlens.size(); ++i) {
      std::int64_t length = 0;
      if (!detail::json_integer(seqlens[i], length) || length <= 0)
        throw error(status_code::invalid_length,
                    fmt::format("{}: seqlens[{}] = {} must be a positive integer length", source, i,
                                detail::describe_json(seqlens[i])),
                    static_cast<std::int64_t>(i));
      batch.lengths.push_back(length);
    }
    if (j.contains("name") && j["name"].is_string())
      batch.name = j["name"].get<std::string>();
    batch.world_size =
        detail::optional_integer(j, source, {"total_gpus", "world_size"}, max_world_size);
    batch.max_tokens_per_rank = detail::optional_integer(
        j, source, {"max_seq_len_per_rank", "max_tokens_per_rank"}, max_tokens_per_rank_limit);
    batch.min_cp = detail::optional_integer(j, source, {"min_cp_size"}, max_world_size);
    batch.microbatch_multiple =
        detail::optional_integer(j, source, {"vpp_microbatch_group_size"}, max_microbatch_multiple);
  } else {
    std::size_t line_no = 0;
    std::size_t pos = 0;
    while (pos <= text.size()) {
      const auto end = std::min(text.find('\n', pos), text.size());
      std::string_view line(text.data() + pos, end - pos);
      ++line_no;
      pos = end + 1;
      if (const auto hash = line.find('#'); hash != std::string_view::npos)
        line = line.substr(0, hash);
      line = detail::trim(line);
      if (line.empty())
        continue;
      const auto value = detail::parse_integer(line);
      if (!value)
        throw error(status_code::invalid_length,
                    fmt::format("{}:{}: {} is not an integer length", source, line_no,
                                detail::quoted_text(line, '\'')),
                    static_cast<std::int64_t>(batch.lengths.size()));
      if (*value <= 0)
        throw error(status_code::invalid_length,
                    fmt::format("{}:{}: length = {} must be positive", source, line_no, *value),
                    static_cast<std::int64_t>(batch.lengths.size()));
      if (std::cmp_equal(batch.lengths.size(), max_batch_samples))
        throw error(status_code::invalid_length,
                    fmt::format("{}:{}: a length past the limit of {} samples", source, line_no,
                                max_batch_samples),
                    max_batch_samples);
      batch.lengths.push_back(*value);
    }
  }
  if (batch.lengths.empty())
    throw error(status_code::empty_batch,
                fmt::format("{}: no sample lengths in the input", source));
  return batch;
}

//! CSV rows `length,cp,seconds` (a sample of `length` tokens on `cp` ranks took `seconds` per
//! rank, forward and backward) and, optionally, `microbatch,seconds` (one micro-batch's fixed
//! cost); `#` comments, blank lines, one header line and a leading UTF-8 byte order mark are
//! skipped.
inline std::vector<calibration_row> read_calibration(std::istream& in, std::string_view source) {
  std::vector<calibration_row> rows;
  std::string raw;
  std::size_t line_no = 0;
  bool first_content = true;
  while (std::getline(in, raw)) {
    ++line_no;
    // (a byte order mark would make a first data row look like a header, skipped)
    std::string_view line = line_no == 1 ? detail::without_bom(raw) : std::string_view(raw);
    if (const auto hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    line = detail::trim(line);
    if (line.empty())
      continue;
    std::string_view fields[3];
    std::size_t count = 0;
    std::size_t p = 0;
    while (count < 3) {
      const auto comma = line.find(',', p);
      fields[count++] = detail::trim(
          line.substr(p, comma == std::string_view::npos ? std::string_view::npos : comma - p));
      if (comma == std::string_view::npos)
        break;
      p = comma + 1;
      if (count == 3)
        throw error(
            status_code::parse_error,
            fmt::format("{}:{}: expected 3 fields length,cp,seconds, got more", source, line_no));
    }
    const auto parse_seconds = [](std::string_view text, double& out) {
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
      return ec == std::errc() && end == text.data() + text.size();
    };
    // (the fit refuses these too, by row; here they are named by file and line)
    const auto check_seconds = [&](double seconds) {
      if (!(seconds > 0 && seconds <= std::numeric_limits<double>::max()))
        throw error(
            status_code::parse_error,
            fmt::format("{}:{}: seconds = {} must be a finite time > 0", source, line_no, seconds));
    };
    if (count == 2 && fields[0] == "microbatch") {
      first_content = false;
      double seconds = 0;
      if (!parse_seconds(fields[1], seconds))
        throw error(status_code::parse_error,
                    fmt::format("{}:{}: {} is not 'microbatch,seconds'", source, line_no,
                                detail::quoted_text(line, '\'')));
      check_seconds(seconds);
      rows.push_back({0, 0, seconds, true});
      continue;
    }
    const auto length = count == 3 ? detail::parse_integer(fields[0]) : std::nullopt;
    const auto cp = count == 3 ? detail::parse_integer(fields[1]) : std::nullopt;
    double seconds = 0;
    bool seconds_ok = false;
    if (count == 3)
      seconds_ok = parse_seconds(fields[2], seconds);
    const bool header = first_content;
    first_content = false;
    if (!length || !cp || !seconds_ok) {
      if (header)
        continue; // the first line may name the columns
      throw error(status_code::parse_error,
                  fmt::format("{}:{}: {} is not 'length,cp,seconds' nor 'microbatch,seconds'",
                              source, line_no, detail::quoted_text(line, '\'')));
    }
    if (*length < 1)
      throw error(status_code::parse_error,
                  fmt::format("{}:{}: length = {} must be positive", source, line_no, *length));
    if (*cp < 1 || *cp > std::numeric_limits<std::int32_t>::max())
      throw error(status_code::parse_error,
                  fmt::format("{}:{}: cp = {} must be in [1, {}]", source, line_no, *cp,
                              std::numeric_limits<std::int32_t>::max()));
    check_seconds(seconds);
    rows.push_back({*length, static_cast<std::int32_t>(*cp), seconds, false});
  }
  if (rows.empty())
    throw error(status_code::parse_error, fmt::format("{}: no calibration rows", source));
  return rows;
}

} // namespace dcpp
