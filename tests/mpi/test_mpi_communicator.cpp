// Tests for include/dcpp/comm/mpi.hpp under mpirun: the communicator contract suite on
// MPI_COMM_WORLD (CI runs it with -np 2 and -np 4) and MPI-specific behaviour.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../support.hpp"

#include <string>
#include <vector>

#include "../comm/contract.hpp"
#include "dcpp/comm/mpi.hpp"
#include "dcpp/dcpp.hpp"

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

TEST_CASE("mpi_communicator: works on a duplicate; the caller's communicator is left as it was") {
  MPI_Errhandler before = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &before);
  // a communicator of the caller's own, with the default (fatal) error handler
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm mine = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, 0, world_rank, &mine) == MPI_SUCCESS);
  {
    auto world = dcpp::mpi_communicator::world();
    auto dcpp_mine = dcpp::mpi_communicator::from(mine);
    CHECK(world.native() != MPI_COMM_WORLD);
    CHECK(dcpp_mine.native() != mine);
    int result = MPI_UNEQUAL;
    MPI_Comm_compare(dcpp_mine.native(), mine, &result);
    CHECK(result == MPI_CONGRUENT); // same ranks in the same order, a different context
    // dcpp's errors are returned on its duplicate (and raised), not fatal
    std::vector<int> v(1);
    CHECK_THROWS_AS(dcpp_mine.broadcast(std::span<int>(v), dcpp_mine.size()), dcpp::error);
    (void)dcpp_mine.group_for(dcpp_mine.rank(), 1); // groups made from the duplicate
  }
  // after dcpp's handles are gone: the caller's communicators and error handlers are unchanged
  MPI_Errhandler after = MPI_ERRHANDLER_NULL, mine_handler = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &after);
  MPI_Comm_get_errhandler(mine, &mine_handler);
  CHECK(after == before);
  CHECK(mine_handler == MPI_ERRORS_ARE_FATAL);
  int size = 0;
  CHECK(MPI_Comm_size(mine, &size) == MPI_SUCCESS); // still valid, still the caller's
  CHECK(size == dcpp::mpi_communicator::world().size());
  MPI_Comm_free(&mine);
}

TEST_CASE("mpi_communicator: create_groups makes a plan's groups before the step") {
  auto world = dcpp::mpi_communicator::world();
  dcpp::plan_options options;
  options.world_size = world.size();
  options.max_tokens_per_rank = 4096;
  std::vector<std::int64_t> lengths{8000, 300, 4000, 7000, 70, 5000, 800, 2000, 6000, 100};
  const auto p = dcpp::planner<dcpp::length_squared_cost>(options).make_plan(lengths);
  world.create_groups(p);
  const std::size_t made = world.cached_groups();
  for (const auto& mb : p.microbatches) // the step: every group is there already
    for (const auto& g : mb.groups)
      if (world.rank() >= g.first_rank && world.rank() < g.first_rank + g.cp)
        (void)world.group_for(g.first_rank, g.cp);
  CHECK(world.cached_groups() == made);

  // the aligned topology: every power-of-two block this rank can be in, once
  auto other = dcpp::mpi_communicator::world();
  other.create_groups(options);
  std::size_t expected = 0;
  for (int cp = 1; cp < world.size(); cp *= 2)
    expected += world.rank() / cp * cp + cp <= world.size() ? 1 : 0;
  CHECK(other.cached_groups() == expected); // the whole world is the communicator itself
  options.group_topology = dcpp::topology::contiguous;
  CHECK_THROWS_WITH_AS(other.create_groups(options), doctest::Contains("create_groups(plan)"),
                       dcpp::error);
}

TEST_CASE("mpi_environment: the thread level is checked") {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    int argc = 0;
    char** argv = nullptr;
    CHECK_THROWS_WITH_AS(dcpp::mpi_environment(&argc, &argv, MPI_THREAD_MULTIPLE),
                         doctest::Contains("below the MPI_THREAD_MULTIPLE asked for"), dcpp::error);
  }
  int argc = 0;
  char** argv = nullptr;
  const dcpp::mpi_environment again(&argc, &argv, MPI_THREAD_SINGLE); // already initialised
  CHECK(again.thread_level() == provided);
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
