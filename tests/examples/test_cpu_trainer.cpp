// The proof that dynamic CP changes nothing but speed: the CPU trainer under `mpirun -np 4`
// (dynamic CP: long samples split over 2-4 ranks, micro-batches routed) and on one rank give the
// same losses and final weights up to fp32 summation order; and the model learns its task.
#include "../support.hpp"

#include <cmath>
#include <string>

#include "trainer_runs.hpp"

namespace {
trainer_runs::run_output train(int ranks, int steps, const std::string& tag) {
  return trainer_runs::train(trainer_runs::env("DCPP_CPU_TRAINER"), ranks, steps, "cpu_" + tag);
}
} // namespace

TEST_CASE("cpu trainer: dynamic CP on 4 ranks gives the losses and weights of one rank") {
  const auto four = train(4, 5, "np4");
  const auto one = train(1, 5, "np1");
  REQUIRE(four.losses.size() == 5);
  REQUIRE(one.losses.size() == 5);
  // fp32: the runs add the same per-token terms in different orders (micro-batches, CP splits
  // of attention and conv, the gradient all-reduce), each step's difference is a few fp32
  // roundings (measured: losses within 6e-9 relative, weights within 6e-8 of max |w| ~ 1 after 6
  // steps); momentum SGD is linear in the gradients, so over 5 steps 1e-6 is a wide margin that
  // still catches a lost, doubled or misrouted token (which moves the loss by ~1e-3).
  for (std::size_t s = 0; s < 5; ++s)
    CHECK(std::abs(four.losses[s] - one.losses[s]) <= 1e-6 * std::abs(one.losses[s]));
  const auto [max_diff, max_w] = trainer_runs::weight_difference(four, one);
  INFO("max weight difference " << max_diff << " of max |w| " << max_w);
  CHECK(max_diff <= 1e-5 * max_w);
}

TEST_CASE("cpu trainer: the loss falls under dynamic CP (the task is learnt)") {
  const auto run = train(4, 30, "learn");
  REQUIRE(run.losses.size() == 30);
  const double first = (run.losses[0] + run.losses[1] + run.losses[2]) / 3;
  const double last = (run.losses[27] + run.losses[28] + run.losses[29]) / 3;
  INFO("loss " << first << " -> " << last);
  CHECK(first > 2.6);        // ln 16 = 2.77 at the start
  CHECK(last < 0.6 * first); // measured: 2.78 -> ~1.0 in 30 steps
  for (const double e : run.efficiency)
    CHECK(e > 0.5);
}
