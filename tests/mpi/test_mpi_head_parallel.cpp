// Tests for include/dcpp/route/head_parallel.hpp under mpirun: the local suite's seeded check
// (groups of every size, bit for bit against the whole tensor) across processes.
#include "../support.hpp"

#include "../route/head_parallel_check.hpp"
#include "dcpp/comm/mpi.hpp"

TEST_CASE("mpi cp2hp / hp2cp: bit for bit against the whole tensor, 300 seeded worlds") {
  auto world = dcpp::mpi_communicator::world();
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    CAPTURE(seed);
    REQUIRE_NOTHROW(dcpp_test::head_parallel::run(world, seed));
  }
}
