// A program outside dcpp's tree that uses it as a consumer would: plans a batch and prints one
// line. Built by tests/consumers/run.sh with CMake, a Meson subproject, pkg-config and plain -I.
#include <cstdint>
#include <vector>

#include <dcpp/dcpp.hpp>
#include <fmt/format.h>

int main() {
  const std::vector<std::int64_t> lengths{1830, 65536, 412, 7000, 300, 24000, 900, 2500};
  dcpp::plan_options options;
  options.world_size = 16;
  options.max_tokens_per_rank = 8192;
  const dcpp::planner<> planner(options);
  const dcpp::plan plan = planner.make_plan(lengths);
  if (!dcpp::validate(plan, options))
    return 1;
  fmt::print("dcpp {} consumer: {} samples in {} micro-batches\n", DCPP_VERSION_STRING,
             plan.lengths.size(), plan.microbatches.size());
  return 0;
}
