// The CP paths of the kernels under mpirun: conv1d halo exchange across processes equals the
// unsplit conv; the global token mean over processes.
#include "../support.hpp"

#include <vector>

#include "../conv/conv_reference.hpp"
#include "dcpp/comm/mpi.hpp"
#include "dcpp/loss/token_mean.hpp"

TEST_CASE("mpi conv1d: the halo path across processes equals the unsplit conv") {
  auto world = dcpp::mpi_communicator::world();
  const std::vector<std::int64_t> lengths{1, 5, 2, 37, 100, 16, 3};
  for (int width : {2, 3, 4})
    REQUIRE_NOTHROW(dcpp_test::conv::check_cp<dcpp::mpi_communicator, float>(
        world, lengths, 8, width, width != 3, 21));
  REQUIRE_NOTHROW(dcpp_test::conv::check_cp<dcpp::mpi_communicator, dcpp::half>(world, lengths, 4,
                                                                                4, true, 22));
  // A sub-group (the first two ranks) as the CP group, the others idle.
  if (world.size() >= 2 && world.rank() < 2) {
    auto group = world.group_for(0, 2);
    REQUIRE_NOTHROW(dcpp_test::conv::check_cp<dcpp::mpi_communicator, dcpp::bfloat16>(
        group, lengths, 3, 4, true, 23));
  }
  world.barrier();
}

TEST_CASE("mpi token mean: per-head totals all-reduced across processes") {
  auto world = dcpp::mpi_communicator::world();
  // Rank r holds r + 1 tokens of loss 1 + r on head 0, and nothing on head 1.
  const std::vector<double> totals{static_cast<double>((world.rank() + 1) * (1 + world.rank())),
                                   0.0, static_cast<double>(world.rank() + 1), 0.0};
  const auto m = dcpp::global_token_mean(world, std::span<const double>(totals), 2);
  double sum = 0, count = 0;
  for (int r = 0; r < world.size(); ++r)
    sum += (r + 1) * (1 + r), count += r + 1;
  CHECK(m.mean[0] == doctest::Approx(sum / count).epsilon(1e-15));
  CHECK(m.counts[0] == static_cast<std::int64_t>(count));
  CHECK(m.mean[1] == 0.0);
  CHECK(m.gradient_scale[1] == 0.0);
}
