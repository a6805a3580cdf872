// Small helpers shared by the host test suites.
#pragma once

#include <cstdint>
#include <string>

#include "dcpp/planner/options.hpp"

namespace dcpp_test {

//! Options with the given world size and token budget, everything else default.
inline dcpp::plan_options options(std::int32_t world_size, std::int64_t max_tokens_per_rank) {
  dcpp::plan_options o;
  o.world_size = world_size;
  o.max_tokens_per_rank = max_tokens_per_rank;
  return o;
}

//! How often `what` occurs in `text`.
inline std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1))
    ++n;
  return n;
}

} // namespace dcpp_test
