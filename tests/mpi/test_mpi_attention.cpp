// Ring attention under mpirun: the K/V ring and the backward's dK/dV ring across processes give
// fp64 causal attention, for the world as one CP group (every head shape, GQA) and for a
// sub-group.
#include "../support.hpp"

#include <string>
#include <vector>

#include <fmt/format.h>

#include "../attention/attention_reference.hpp"
#include "dcpp/comm/mpi.hpp"

namespace {

using namespace dcpp_test::attention;

template <class T>
void check(dcpp::mpi_communicator& comm, int heads, int kv_heads, int dim, std::uint64_t seed,
           int vdim = 0) {
  const auto b = make_batch<T>(seed, {1, 17, 64, 65, 100, 3, 2}, heads, kv_heads, dim, vdim);
  const auto ref = attend(b);
  const auto e = run_rank<T>(comm, b, ref, seed);
  INFO(fmt::format("cp {} rank {} heads {}/{} dim {}/{}: o {:.2e} lse {:.2e} dq {:.2e} dk {:.2e} "
                   "dv {:.2e}",
                   comm.size(), comm.rank(), heads, kv_heads, dim, b.vdim, e.o, e.lse, e.dq, e.dk,
                   e.dv));
  check_errors<T>(e);
  // every real row is checked on exactly one rank of the group
  std::vector<double> rows{static_cast<double>(e.rows)};
  comm.all_reduce(std::span<double>(rows), dcpp::reduce_op::sum);
  CHECK(rows[0] == static_cast<double>(b.tokens()));
}

} // namespace

TEST_CASE_TEMPLATE("mpi ring attention: the world as one CP group equals fp64 attention", T, float,
                   dcpp::half, dcpp::bfloat16) {
  auto world = dcpp::mpi_communicator::world();
  check<T>(world, 4, 4, 64, 61);
  check<T>(world, 4, 2, 64, 62); // GQA
}

TEST_CASE_TEMPLATE("mpi ring attention: head dims 96, MLA's 192/128 and 256, with GQA", T, float,
                   dcpp::bfloat16) {
  auto world = dcpp::mpi_communicator::world();
  check<T>(world, 4, 2, 96, 64);
  check<T>(world, 4, 2, 192, 65, 128); // MLA
  check<T>(world, 2, 1, 256, 66);
}

TEST_CASE("mpi ring attention: a sub-group of two ranks, head dim 128, MQA") {
  auto world = dcpp::mpi_communicator::world();
  if (world.size() >= 2 && world.rank() < 2) {
    auto group = world.group_for(0, 2);
    check<dcpp::half>(group, 2, 1, 128, 63);
  }
  world.barrier();
}
