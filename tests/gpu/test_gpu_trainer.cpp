// The GPU trainer against the CPU trainer: on one GPU its losses and final weights match the
// CPU trainer's on one rank (same model, data and kernels' arithmetic; only the dense layers'
// summation order differs), and under mpirun on several GPUs (dynamic CP over NCCL) they match
// the one-GPU run. Skips (exit 77) when gpu_trainer finds no device.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../support.hpp"

#include <sys/wait.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../examples/trainer_runs.hpp"

namespace {

trainer_runs::run_output gpu(int ranks, int steps, const std::string& tag,
                             const std::string& extra = "") {
  return trainer_runs::train(trainer_runs::env("DCPP_GPU_TRAINER"), ranks, steps, "gpu_" + tag, -1,
                             extra);
}

// fp32 on both sides; the GPU's GEMMs sum dW over tokens in another order than the CPU loops
// (per-tile partial sums), a few roundings per step like the np4-vs-np1 comparison of
// test_cpu_trainer.cpp, which measured 6e-9 relative on the losses: 1e-5 leaves room for the
// device's exp/log and still catches a lost or doubled token (~1e-3).
constexpr double loss_tolerance = 1e-5, weight_tolerance = 1e-4;

void check_same(const trainer_runs::run_output& a, const trainer_runs::run_output& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (std::size_t s = 0; s < a.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(std::abs(a.losses[s] - b.losses[s]) <= loss_tolerance * std::abs(b.losses[s]));
  }
  const auto [max_diff, max_w] = trainer_runs::weight_difference(a, b);
  INFO("max weight difference " << max_diff << " of max |w| " << max_w);
  CHECK(max_diff <= weight_tolerance * max_w);
}

} // namespace

TEST_CASE("gpu trainer on one GPU gives the cpu trainer's losses and weights") {
  const auto device = gpu(0, 5, "one");
  const auto host = trainer_runs::train(trainer_runs::env("DCPP_CPU_TRAINER"), 0, 5, "cpu_ref");
  check_same(device, host);
}

TEST_CASE("gpu trainer: dynamic CP over NCCL on several GPUs gives the one-GPU results") {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2 ||
      std::getenv("DCPP_MPIEXEC") == nullptr) {
    MESSAGE("fewer than 2 GPUs or no mpiexec: the multi-GPU comparison is not run");
    return;
  }
  const int ranks = std::min(devices, 4);
  const auto many = gpu(ranks, 5, "many");
  const auto one = gpu(0, 5, "one");
  check_same(many, one);
}

TEST_CASE("gpu trainer: CP groups of 4 over NCCL (each head of the head-parallel layer on two "
          "GPUs) give the one-GPU results") {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 4 ||
      std::getenv("DCPP_MPIEXEC") == nullptr) {
    MESSAGE("fewer than 4 GPUs or no mpiexec: the CP-4 comparison is not run");
    return;
  }
  // as in test_cpu_trainer.cpp: 256 tokens per rank puts the long samples on groups of 4
  const auto four = gpu(4, 5, "cp4", "--max-tokens-per-rank 256");
  CHECK(*std::max_element(four.largest_cp.begin(), four.largest_cp.end()) == 4);
  check_same(four, gpu(0, 5, "one_cp4"));
}

int main(int argc, char** argv) {
  // gpu_trainer decides about the device: it exits 77 without one.
  const char* program = std::getenv("DCPP_GPU_TRAINER");
  if (program == nullptr) {
    std::puts("DCPP_GPU_TRAINER is not set (meson test sets it)");
    return 1;
  }
  const int status = std::system(fmt::format("{} --steps 1 --quiet", program).c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    std::puts("gpu_trainer found no CUDA device: skipping the GPU trainer comparison");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
