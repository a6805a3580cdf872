// The smallest use of the planner: plan one batch, check it first, print the plan's table.
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include <dcpp/dcpp.hpp>

int main() {
  // [plan-batch]
  const std::vector<std::int64_t> lengths{1830, 65536, 412, 7000, 300, 24000, 900, 2500};
  dcpp::plan_options options;
  options.world_size = 16;                // DP x CP ranks
  options.max_tokens_per_rank = 8192;     // token budget per rank and micro-batch
  const dcpp::planner<> planner(options); // transformer cost (llama3-8b@h100), balanced packing
  if (const dcpp::status s = planner.can_plan(lengths); !s) {
    fmt::print(stderr, "cannot plan: {}\n", s.message); // names the sample, value and limit
    return 1;
  }
  const dcpp::plan plan = planner.make_plan(lengths);
  for (const auto& group : plan.microbatches.front().groups)
    fmt::print("ranks {}-{} run samples {}\n", group.first_rank, group.first_rank + group.cp - 1,
               fmt::join(group.samples, ", "));
  // [plan-batch]
  fmt::print("{}", plan);
  return 0;
}
