// The body of a program's main, guarded: every exception ends in a one-line message on stderr
// and a distinct exit code, never in std::terminate.
#pragma once

#include <cstdio>
#include <exception>
#include <new>
#include <string_view>

#include <fmt/format.h>

#include "dcpp/error.hpp"

namespace dcpp {

//! Exit codes of dcpp's programs (docs/cli.md). CLI11's usage errors keep CLI11's codes (100+).
enum exit_code : int {
  exit_success = 0,
  exit_failure = 1,       //!< a dcpp::error: bad input, a refused option, a failed read or write
  exit_out_of_memory = 3, //!< std::bad_alloc: the input needs more memory than there is
  exit_internal = 4,      //!< any other exception: a bug, reported with its message
};

//! Runs `body` (returning the exit code) and turns an escaping exception into `prefix` + a one-line
//! message on stderr and the matching exit_code.
template <class Body>
int guarded_main(std::string_view prefix, Body&& body) noexcept {
  const auto say = [&](std::string_view what) noexcept {
    std::fprintf(stderr, "%.*s%.*s\n", static_cast<int>(prefix.size()), prefix.data(),
                 static_cast<int>(what.size()), what.data());
  };
  try {
    return body();
  } catch (const error& e) {
    say(e.what());
    return exit_failure;
  } catch (const std::bad_alloc&) {
    say("out of memory (the input needs more than this machine can allocate)");
    return exit_out_of_memory;
  } catch (const std::exception& e) {
    try {
      say(fmt::format("internal error: {}", e.what()));
    } catch (...) {
      say("internal error");
    }
    return exit_internal;
  } catch (...) {
    say("internal error: an unknown exception");
    return exit_internal;
  }
}

} // namespace dcpp
