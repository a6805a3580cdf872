// Status values for input-dependent failures and the dcpp::error exception that carries them.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "dcpp/core/config.hpp" // the C++20 check
#include "dcpp/version.hpp"

namespace dcpp {

//! What went wrong, as a value: returned by the `can_*` checks, carried by `dcpp::error`.
enum class status_code : std::uint8_t {
  ok = 0,
  empty_batch,
  invalid_length,
  sample_too_long,
  invalid_option,
  world_not_divisible,
  budget_below_padding,
  infeasible,
  invalid_plan,
  parse_error,
  communication_error,
  io_error,     //!< a file could not be read or written (the path and the system's reason)
  invalid_cost, //!< an estimator priced a sample outside its contract (NaN, infinite, negative)
};

constexpr std::string_view to_string(status_code code) noexcept {
  switch (code) {
  case status_code::ok: return "ok";
  case status_code::empty_batch: return "empty_batch";
  case status_code::invalid_length: return "invalid_length";
  case status_code::sample_too_long: return "sample_too_long";
  case status_code::invalid_option: return "invalid_option";
  case status_code::world_not_divisible: return "world_not_divisible";
  case status_code::budget_below_padding: return "budget_below_padding";
  case status_code::infeasible: return "infeasible";
  case status_code::invalid_plan: return "invalid_plan";
  case status_code::parse_error: return "parse_error";
  case status_code::communication_error: return "communication_error";
  case status_code::io_error: return "io_error";
  case status_code::invalid_cost: return "invalid_cost";
  }
  return "unknown";
}

//! Result of a check: `ok()` or a code with a one-line message naming field, value and limit.
//! `sample` is the offending sample index (or -1 when the problem is not about one sample).
struct status {
  status_code code = status_code::ok;
  std::string message;
  std::int64_t sample = -1;

  [[nodiscard]] bool ok() const noexcept { return code == status_code::ok; }
  explicit operator bool() const noexcept { return ok(); }

  static status success() { return {}; }
  static status failure(status_code code, std::string message, std::int64_t sample = -1) {
    return status{code, std::move(message), sample};
  }
};

//! Thrown by the acting calls (`plan`, readers) when a check fails.
class error : public std::runtime_error {
public:
  explicit error(status s) : std::runtime_error(s.message), status_(std::move(s)) {}
  error(status_code code, std::string message, std::int64_t sample = -1)
      : error(status::failure(code, std::move(message), sample)) {}

  [[nodiscard]] const status& why() const noexcept { return status_; }
  [[nodiscard]] status_code code() const noexcept { return status_.code; }
  [[nodiscard]] std::int64_t sample() const noexcept { return status_.sample; }

private:
  status status_;
};

//! Throws `error(s)` unless `s.ok()`.
inline void throw_if_failed(const status& s) {
  if (!s.ok())
    throw error(s);
}

} // namespace dcpp
