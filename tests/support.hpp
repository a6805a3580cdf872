// Test harness for every doctest suite: contracts throw, so that they are testable.
#pragma once

#include <stdexcept>
#include <string>

namespace dcpp_test {
struct contract_violation : std::logic_error {
  using std::logic_error::logic_error;
};
} // namespace dcpp_test

#define DCPP_ENABLE_CONTRACTS 1
#define DCPP_CONTRACT_VIOLATION(text, file, line)                                                  \
  (throw ::dcpp_test::contract_violation(std::string(text) + " at " + (file) + ":" +               \
                                         std::to_string(line)))

#include <doctest/doctest.h>
