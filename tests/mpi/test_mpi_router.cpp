// Tests for include/dcpp/route/router.hpp under mpirun: the same seeded data-path checks as the
// local suite (conservation, bit-exact inverse route) and fail-together errors, across processes.
#include "../support.hpp"

#include <string>

#include "../route/round_trip.hpp"
#include "dcpp/comm/mpi.hpp"

TEST_CASE("mpi router: conservation and bit-exact round trip, 400 workloads") {
  auto world = dcpp::mpi_communicator::world();
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    CAPTURE(seed);
    REQUIRE_NOTHROW(dcpp_test::route::run(world, seed,
                                          seed % 3 == 0 ? dcpp::placement::as_planned
                                                        : dcpp::placement::locality_aware));
  }
}

TEST_CASE("mpi router: a bad shard on the last rank fails every rank with its message") {
  auto world = dcpp::mpi_communicator::world();
  const auto w = dcpp_test::route::make_workload(17, world.size());
  auto shard = dcpp_test::route::make_shard(w, world.rank(), 17);
  if (world.rank() == world.size() - 1)
    shard.get<dcpp::fields::loss_mask>().clear();
  dcpp::planner<dcpp::length_squared_cost> planner(w.options);
  const std::string expected =
      "rank " + std::to_string(world.size() - 1) + ": field 'loss_mask' holds 0 values";
  try {
    (void)dcpp::plan_step(planner, world, shard);
    FAIL("no error");
  } catch (const dcpp::error& e) {
    CHECK(std::string(e.what()).starts_with(expected));
  }
}
