// Tests for include/dcpp/comm/plan_communicator.hpp.
#include "../support.hpp"

#include <cstdint>
#include <vector>

#include "dcpp/comm/plan_communicator.hpp"

namespace {
struct no_gather {
  int rank() const { return 0; }
  int size() const { return 1; }
  std::uint64_t all_reduce_min(std::uint64_t v) { return v; }
  std::uint64_t all_reduce_max(std::uint64_t v) { return v; }
};
struct wrong_gather_type {
  int rank() const { return 0; }
  int size() const { return 1; }
  std::vector<int> all_gather_v(std::span<const std::int64_t>) { return {}; }
  std::uint64_t all_reduce_min(std::uint64_t v) { return v; }
  std::uint64_t all_reduce_max(std::uint64_t v) { return v; }
};
} // namespace

TEST_CASE("plan_communicator: the concept") {
  static_assert(dcpp::plan_communicator<dcpp::serial_communicator>);
  static_assert(!dcpp::plan_communicator<no_gather>);
  static_assert(!dcpp::plan_communicator<wrong_gather_type>);
  static_assert(!dcpp::plan_communicator<int>);
}

TEST_CASE("plan_communicator: the serial communicator is one rank") {
  dcpp::serial_communicator c;
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  const std::vector<std::int64_t> local{5, 0, 77};
  CHECK(c.all_gather_v(local) == local);
  CHECK(c.all_gather_v(std::span<const std::int64_t>{}).empty());
  CHECK(c.all_reduce_min(42) == 42);
  CHECK(c.all_reduce_max(~std::uint64_t{0}) == ~std::uint64_t{0});
}
