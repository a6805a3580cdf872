// Kernel benchmark on a GPU: achieved bandwidth of the conv1d and loss-reduction kernels against
// the device's peak (docs/kernels.md gives the expected fractions on an H100). Built whenever
// CUDA is enabled; exits 77 with a message when no device is present.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "dcpp/conv/causal_conv1d.cuh"
#include "dcpp/core/float16.hpp"
#include "dcpp/loss/token_reduce.cuh"

namespace {

#define BENCH_CHECK(call)                                                                          \
  do {                                                                                             \
    const cudaError_t e = (call);                                                                  \
    if (e != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e));                       \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

template <class F>
float time_ms(F&& f, int repeats) {
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  f(); // warm-up
  BENCH_CHECK(cudaEventRecord(a));
  for (int r = 0; r < repeats; ++r)
    f();
  BENCH_CHECK(cudaEventRecord(b));
  BENCH_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms / static_cast<float>(repeats);
}

} // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("bench_kernels_gpu: no CUDA device present; skipping");
    return 77;
  }
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  int memory_clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  const double peak = 2.0 * memory_clock_khz * 1e3 * bus_bits / 8.0; // bytes/s (DDR)
  std::printf("%s, peak memory bandwidth %.0f GB/s\n", prop.name, peak / 1e9);
  std::printf("%-28s %10s %10s %12s %10s\n", "kernel", "tokens", "ms", "GB/s", "of peak");

  using T = dcpp::bfloat16;
  const std::int64_t tokens = 65536;
  const int channels = 4096;
  const std::size_t n = static_cast<std::size_t>(tokens) * channels;
  T *x, *y, *dy, *dx, *w, *b;
  float *dw, *db, *partial;
  std::int32_t* cu;
  BENCH_CHECK(cudaMalloc(&x, n * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&y, n * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&dy, n * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&dx, n * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&w, channels * 4 * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&b, channels * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&dw, channels * 4 * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&db, channels * sizeof(float)));
  BENCH_CHECK(
      cudaMalloc(&partial, dcpp::kernels::conv1d_backward_workspace_bytes(tokens, channels, 4)));
  std::vector<std::int32_t> host_cu;
  for (std::int64_t t = 0; t <= tokens; t += 4096)
    host_cu.push_back(static_cast<std::int32_t>(t));
  BENCH_CHECK(cudaMalloc(&cu, host_cu.size() * sizeof(std::int32_t)));
  BENCH_CHECK(cudaMemcpy(cu, host_cu.data(), host_cu.size() * sizeof(std::int32_t),
                         cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemset(x, 0, n * sizeof(T)));
  BENCH_CHECK(cudaMemset(dy, 0, n * sizeof(T)));
  BENCH_CHECK(cudaMemset(w, 0, channels * 4 * sizeof(T)));
  BENCH_CHECK(cudaMemset(b, 0, channels * sizeof(T)));

  dcpp::kernels::conv1d_params<T> p;
  p.x = x, p.weight = w, p.bias = b, p.y = y, p.dy = dy, p.dx = dx, p.partial = partial;
  p.dweight = dw, p.dbias = db, p.tokens = tokens, p.channels = channels, p.silu = true;
  std::vector<std::int64_t> zeros(host_cu.size(), 0), lengths, halos(host_cu.size(), -1);
  for (std::size_t i = 0; i + 1 < host_cu.size(); ++i)
    lengths.push_back(host_cu[i + 1] - host_cu[i]);
  p.seg.begin = cu;
  p.seg.count = static_cast<int>(host_cu.size()) - 1; // null position/length/halo: whole sequences
  const double bytes_fwd = 2.0 * static_cast<double>(n) * sizeof(T);
  const float fwd =
      time_ms([&] { BENCH_CHECK((dcpp::kernels::conv1d_forward<4, T>(p, nullptr))); }, 20);
  std::printf("%-28s %10lld %10.3f %12.1f %9.1f%%\n", "conv1d fwd W=4 bf16 C=4096",
              static_cast<long long>(tokens), fwd, bytes_fwd / fwd / 1e6,
              100 * bytes_fwd / fwd / 1e-3 / peak);
  const double bytes_bwd = 3.0 * static_cast<double>(n) * sizeof(T);
  const float bwd =
      time_ms([&] { BENCH_CHECK((dcpp::kernels::conv1d_backward<4, T>(p, nullptr))); }, 20);
  std::printf("%-28s %10lld %10.3f %12.1f %9.1f%%\n", "conv1d bwd W=4 bf16 C=4096",
              static_cast<long long>(tokens), bwd, bytes_bwd / bwd / 1e6,
              100 * bytes_bwd / bwd / 1e-3 / peak);
  return 0;
}
