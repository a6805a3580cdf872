// custom_cost: a workload-cost policy written by a user and plugged into the planner. The model
// is a mixture-of-experts transformer: attention is quadratic in the sample length and split
// over the CP group, but the expert layers are linear in the tokens each rank holds and add an
// all-to-all of those tokens (expert parallelism), and every ring step beyond the first has a
// latency the attention cannot hide. The default transformer cost and Megatron-LM's length^2/cp
// misjudge such a model; planning with the right cost gives a faster step. The program plans one
// long-tailed batch three ways and evaluates every plan under the MoE cost.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include <dcpp/dcpp.hpp>
#include <dcpp/workload/generators.hpp>

// [custom-cost]
//! Seconds per rank for one sample of `length` tokens on a group of `cp` ranks (forward and
//! backward). Models the concept `dcpp::workload_estimator`: `cost(length, cp)`, copyable.
struct moe_cost {
  double attention = 1.1e-10;   //!< s per (token^2) of causal attention, whole sample
  double experts = 9.0e-6;      //!< s per token on a rank: routed expert MLPs (top-2 of 64)
  double dispatch = 4.0e-6;     //!< s per token on a rank: the expert all-to-all, both ways
  double ring_step = 400e-6;    //!< s of exposed latency per ring step (cp - 1 of them)
  double per_microbatch = 2e-3; //!< s per micro-batch: launches, the mesh's collectives

  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const {
    const double l = static_cast<double>(length), tokens_per_rank = l / cp;
    return attention * l * l / cp + (experts + dispatch) * tokens_per_rank + ring_step * (cp - 1);
  }
  //! Optional: priced once per micro-batch, so that a plan pays for the rounds it adds.
  [[nodiscard]] double microbatch_overhead() const { return per_microbatch; }
};
static_assert(dcpp::workload_estimator<moe_cost>);
// [custom-cost]

namespace {

struct row {
  const char* planned_with;
  dcpp::plan plan;
};

} // namespace

int main() {
  const std::vector<std::int64_t> lengths = dcpp::workload::long_tail(512, 2026);
  dcpp::plan_options options;
  options.world_size = 32;
  options.max_tokens_per_rank = 16384;

  // [plan-with-custom-cost]
  const dcpp::planner<moe_cost> moe_planner(options); // balanced packing, the user's cost
  const dcpp::plan moe_plan = moe_planner.make_plan(lengths);
  // [plan-with-custom-cost]
  std::vector<row> rows{
      {"moe_cost (the user's)", moe_plan},
      {"transformer_cost (default)", dcpp::planner<>(options).make_plan(lengths)},
      {"megatron_cost (L^2/cp + ring)",
       dcpp::planner<dcpp::megatron_cost>(options).make_plan(lengths)},
      {"length_squared_cost (L^2/cp)",
       dcpp::planner<dcpp::length_squared_cost>(options).make_plan(lengths)},
  };
  // Every plan judged by the model that is true for this network.
  const dcpp::problem pr = dcpp::make_problem(options, lengths);
  fmt::print("{} samples ({} to {} tokens), {} ranks, {} tokens per rank; every plan evaluated "
             "under moe_cost\n",
             lengths.size(), *std::min_element(lengths.begin(), lengths.end()),
             *std::max_element(lengths.begin(), lengths.end()), options.world_size,
             options.max_tokens_per_rank);
  fmt::print("{:<30} {:>10} {:>12} {:>11} {:>10}\n", "planned with", "step (s)", "lower bound",
             "efficiency", "micro-b.");
  for (auto& r : rows) {
    if (const auto s = dcpp::validate(r.plan, options); !s) {
      fmt::print(stderr, "invalid plan: {}\n", s.message);
      return 1;
    }
    dcpp::evaluate(r.plan, pr, moe_cost{});
    fmt::print("{:<30} {:>10.4f} {:>12.4f} {:>11.3f} {:>10}\n", r.planned_with,
               r.plan.metrics.estimated_step_time, r.plan.metrics.lower_bound,
               r.plan.metrics.efficiency, r.plan.microbatches.size());
  }
  return 0;
}
