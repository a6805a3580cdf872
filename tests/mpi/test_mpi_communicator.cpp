// Tests for include/dcpp/comm/mpi.hpp under mpirun: the communicator contract suite on
// MPI_COMM_WORLD (CI runs it with -np 2 and -np 4) and MPI-specific behaviour.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../support.hpp"

#include <string>
#include <vector>

#include "../comm/contract.hpp"
#include "dcpp/comm/mpi.hpp"

TEST_CASE("mpi_communicator: the communicator contract") {
  auto world = dcpp::mpi_communicator::world();
  CHECK_NOTHROW(dcpp_test::contract::run_all(world));
}

TEST_CASE("mpi_communicator: errors name the MPI call") {
  auto world = dcpp::mpi_communicator::world();
  std::vector<int> v(1);
  CHECK_THROWS_WITH_AS(world.broadcast(std::span<int>(v), world.size()),
                       doctest::Contains("is outside [0, "), dcpp::error);
  // An invalid tag is rejected by MPI itself; the error names the call.
  std::vector<int> send(1), recv(1);
  CHECK_THROWS_WITH_AS((void)world.exchange(std::span<const int>(send), world.rank(),
                                            std::span<int>(recv), world.rank(), -5),
                       doctest::Contains("MPI_Irecv failed"), dcpp::error);
}

TEST_CASE("mpi_communicator: groups are cached and outlive the handles that made them") {
  auto world = dcpp::mpi_communicator::world();
  const int cp = world.size() >= 2 ? 2 : 1;
  const int first = world.rank() / cp * cp;
  if (first + cp <= world.size()) {
    const MPI_Comm a = world.group_for(first, cp).native();
    const MPI_Comm b = world.group_for(first, cp).native();
    CHECK(a == b);
    auto copy = world; // copies share the cache
    CHECK(copy.group_for(first, cp).native() == a);
  }
  world.barrier();
}

int main(int argc, char** argv) {
  dcpp::mpi_environment env(&argc, &argv);
  doctest::Context context(argc, argv);
  context.setOption("no-intro", true);
  const int failed = context.run();
  // Every rank must agree on the outcome so that mpirun reports failure from any rank.
  int result = failed != 0 ? 1 : 0, worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
