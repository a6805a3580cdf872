// Kernel benchmark on a GPU: achieved bandwidth of the conv1d and loss-reduction kernels against
// the device's peak, and the ring attention steps' tensor-core throughput against the peak
// (docs/kernels.md gives the expected fractions on an H100). Built whenever CUDA is enabled; exits
// 77 with a message when no device is present.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "dcpp/attention/ring_attention.cuh"
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

  // Ring attention, one step of each kind on the diagonal's geometry (cp = 1: every sequence's
  // two halves on this GPU), bf16, head dim 128, 16 query heads, GQA 4:1. Useful flops: 4 D per
  // visible (query, key) pair and head forward, 10 D backward (FlashAttention's accounting; the
  // dQ and dK/dV kernels recompute S and dP, so they execute 14 D).
  {
    constexpr int D = 128, H = 16, HK = 4, L = 4096, SEQ = 8;
    const std::int64_t att_tokens = static_cast<std::int64_t>(L) * SEQ;
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    const double per_sm_clock = prop.major >= 9 ? 4096.0 : 2048.0; // dense bf16 flops/clk/SM
    const double tc_peak = per_sm_clock * prop.multiProcessorCount * clock_khz * 1e3;
    std::printf("\ntensor-core peak (dense bf16, %.0f flops/clk/SM) %.0f TFLOP/s\n", per_sm_clock,
                tc_peak / 1e12);
    std::printf("%-28s %10s %10s %12s %10s\n", "kernel", "tokens", "ms", "TFLOP/s", "of peak");
    std::vector<std::int32_t> offset, real, tseq, tbeg, tend;
    for (int s = 0; s <= SEQ; ++s)
      offset.push_back(s * L);
    for (int s = 0; s < SEQ; ++s) {
      real.push_back(L / 2), real.push_back(L / 2);
      for (int b = 0; b < L; b += 64)
        tseq.push_back(s), tbeg.push_back(s * L + b), tend.push_back(s * L + b + 64);
    }
    auto upload = [](const std::vector<std::int32_t>& v) {
      std::int32_t* d = nullptr;
      BENCH_CHECK(cudaMalloc(&d, v.size() * sizeof(std::int32_t)));
      BENCH_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
      return d;
    };
    const std::size_t qn = static_cast<std::size_t>(att_tokens) * H * D,
                      kn = static_cast<std::size_t>(att_tokens) * HK * D;
    T *q, *k, *v, *o, *dout;
    float *of, *lse, *dsum, *dq, *dk, *dv;
    BENCH_CHECK(cudaMalloc(&q, qn * sizeof(T)));
    BENCH_CHECK(cudaMalloc(&o, qn * sizeof(T)));
    BENCH_CHECK(cudaMalloc(&dout, qn * sizeof(T)));
    BENCH_CHECK(cudaMalloc(&k, kn * sizeof(T)));
    BENCH_CHECK(cudaMalloc(&v, kn * sizeof(T)));
    BENCH_CHECK(cudaMalloc(&of, qn * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&dq, qn * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&dk, kn * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&dv, kn * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&lse, att_tokens * H * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&dsum, att_tokens * H * sizeof(float)));
    for (T* t : {q, o, dout})
      BENCH_CHECK(cudaMemset(t, 0, qn * sizeof(T)));
    for (T* t : {k, v})
      BENCH_CHECK(cudaMemset(t, 0, kn * sizeof(T)));
    BENCH_CHECK(cudaMemset(lse, 0, att_tokens * H * sizeof(float)));
    dcpp::kernels::attention_params<T> a;
    a.q = q, a.k = k, a.v = v, a.o = of, a.lse = lse, a.out = o, a.dout = dout;
    a.lse_final = lse, a.dsum = dsum, a.dq = dq, a.dk = dk, a.dv = dv;
    a.tokens = att_tokens, a.heads = H, a.kv_heads = HK, a.scale = 0.088f;
    const std::int32_t* d_offset = upload(offset);
    const std::int32_t* d_real = upload(real);
    a.layout = {d_offset, d_real, d_real, SEQ};
    a.tiles = {upload(tseq), upload(tbeg), upload(tend), static_cast<int>(tseq.size())};
    const double pairs = SEQ * (static_cast<double>(L) * (L + 1) / 2); // diagonal step
    const double half_pairs = SEQ * (static_cast<double>(L) * L / 2);  // lower / upper steps
    struct row {
      const char* name;
      dcpp::kernels::ring_step_kind kind;
      double pairs;
    };
    for (const row r : {row{"attn fwd diagonal", dcpp::kernels::ring_step_kind::diagonal, pairs},
                        row{"attn fwd lower", dcpp::kernels::ring_step_kind::lower, half_pairs}}) {
      a.kind = r.kind;
      const float ms = time_ms(
          [&] { BENCH_CHECK((dcpp::kernels::attention_forward<D, D, T>(a, nullptr))); }, 10);
      const double flops = 4.0 * D * H * r.pairs;
      std::printf("%-28s %10lld %10.3f %12.1f %9.1f%%\n", r.name,
                  static_cast<long long>(att_tokens), ms, flops / ms / 1e9,
                  100 * flops / ms / 1e-3 / tc_peak);
    }
    a.kind = dcpp::kernels::ring_step_kind::diagonal;
    const float ms = time_ms(
        [&] { BENCH_CHECK((dcpp::kernels::attention_backward<D, D, T>(a, a.tiles, nullptr))); },
        10);
    const double flops = 10.0 * D * H * pairs;
    std::printf("%-28s %10lld %10.3f %12.1f %9.1f%%\n", "attn bwd diagonal",
                static_cast<long long>(att_tokens), ms, flops / ms / 1e9,
                100 * flops / ms / 1e-3 / tc_peak);
  }
  return 0;
}
