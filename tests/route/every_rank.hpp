// What the route suites share for errors: run a body on every rank of a local world and collect
// the message each rank's dcpp::error carried.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "dcpp/comm/local.hpp"
#include "dcpp/error.hpp"

namespace dcpp_test::route {

//! Runs `body` on `world` ranks and returns the error message each rank saw ("" if none).
template <class F>
std::vector<std::string> messages_on_every_rank(int world, F body) {
  std::mutex m;
  std::vector<std::string> out(static_cast<std::size_t>(world));
  dcpp::run_local(world, [&](dcpp::local_communicator& c) {
    try {
      body(c);
    } catch (const dcpp::error& e) {
      std::lock_guard lock(m);
      out[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  return out;
}

} // namespace dcpp_test::route
