// Test harness for every doctest suite: contracts throw, so that they are testable.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace dcpp_test {
struct contract_violation : std::logic_error {
  using std::logic_error::logic_error;
};

//! True when the environment sets DCPP_TESTS_QUICK, as CI's sanitizer build (-O0, ASan, UBSan)
//! does: the slowest tests then run a stated part of their inputs. `./dev.sh test` runs them all.
inline bool quick() {
  return std::getenv("DCPP_TESTS_QUICK") != nullptr;
}
} // namespace dcpp_test

#define DCPP_ENABLE_CONTRACTS 1
#define DCPP_CONTRACT_VIOLATION(text, file, line)                                                  \
  (throw ::dcpp_test::contract_violation(std::string(text) + " at " + (file) + ":" +               \
                                         std::to_string(line)))

#include <doctest/doctest.h>
