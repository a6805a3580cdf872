// Kernel benchmark on a GPU: achieved bandwidth of the conv1d kernels against the device's peak,
// and the ring attention steps' tensor-core throughput per head shape against the peak and
// docs/kernels.md's H100 predictions. Inputs are random (uniform, seeded): tensor-core power, and
// with it the clock, depends on the data, so zeros would read high. Built whenever CUDA is
// enabled; exits 77 with a message when no device is present. --json PATH also writes the rows.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dcpp/core/float16.hpp"
#include "dcpp/kernels/attention/ring_attention.cuh"
#include "dcpp/kernels/conv/causal_conv1d.cuh"
#include "dcpp/kernels/loss/token_reduce.cuh"

namespace {

#define BENCH_CHECK(call)                                                                          \
  do {                                                                                             \
    const cudaError_t e = (call);                                                                  \
    if (e != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e));                       \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

//! One measured row, for --json.
struct bench_row {
  std::string kernel;
  long long tokens;
  double ms, rate, of_peak, predicted;
  const char* unit;
};
std::vector<bench_row> rows;

//! x[i] = center + a uniform value in [-amplitude, amplitude) from a hash of (seed, i).
template <class T>
__global__ void random_fill_kernel(T* x, std::size_t n, std::uint64_t seed, float amplitude,
                                   float center) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) / static_cast<float>(1ull << 24); // [0, 1)
  x[i] = dcpp::from_float<T>(center + (2.0f * u - 1.0f) * amplitude);
}

template <class T>
void random_fill(T* x, std::size_t n, std::uint64_t seed, float amplitude, float center = 0) {
  random_fill_kernel<T>
      <<<static_cast<unsigned>((n + 255) / 256), 256>>>(x, n, seed, amplitude, center);
  BENCH_CHECK(cudaGetLastError());
}

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

//! Forward (diagonal and lower step) and backward (diagonal step) of one head shape; useful
//! flops: 2 (DQK + DV) per visible (query, key) pair and head forward, 2 (3 DQK + 2 DV) backward
//! (FlashAttention's accounting: 4D and 10D at equal head dims; the dQ and dK/dV kernels also
//! recompute S and dP, which is not counted).
template <int DQK, int DV>
void bench_attention(double tc_peak, double predicted_forward, double predicted_backward) {
  using T = dcpp::bfloat16;
  constexpr int H = 16, HK = 4, L = 4096, SEQ = 8;
  const std::int64_t tokens = static_cast<std::int64_t>(L) * SEQ;
  auto upload = [](const std::vector<std::int32_t>& v) {
    std::int32_t* d = nullptr;
    BENCH_CHECK(cudaMalloc(&d, v.size() * sizeof(std::int32_t)));
    BENCH_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
    return d;
  };
  auto tiles = [&](int rows) {
    std::vector<std::int32_t> seq, begin, end;
    for (int s = 0; s < SEQ; ++s)
      for (int b = 0; b < L; b += rows)
        seq.push_back(s), begin.push_back(s * L + b), end.push_back(s * L + b + rows);
    return dcpp::kernels::attention_tiles{upload(seq), upload(begin), upload(end),
                                          static_cast<int>(seq.size())};
  };
  std::vector<std::int32_t> offset, real;
  for (int s = 0; s <= SEQ; ++s)
    offset.push_back(s * L);
  for (int s = 0; s < SEQ; ++s)
    real.push_back(L / 2), real.push_back(L / 2);
  const auto n = static_cast<std::size_t>(tokens);
  const std::size_t qn = n * H * DQK, on = n * H * DV, kn = n * HK * DQK, vn = n * HK * DV;
  T *q, *k, *v, *o, *dout;
  float *of, *lse, *dsum, *dq, *dk, *dv;
  BENCH_CHECK(cudaMalloc(&q, qn * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&o, on * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&dout, on * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&k, kn * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&v, vn * sizeof(T)));
  BENCH_CHECK(cudaMalloc(&of, on * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&dq, qn * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&dk, kn * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&dv, vn * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&lse, n * H * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&dsum, n * H * sizeof(float)));
  random_fill(q, qn, 1, 2.0f);
  random_fill(o, on, 2, 1.0f);
  random_fill(dout, on, 3, 1.0f);
  random_fill(k, kn, 4, 2.0f);
  random_fill(v, vn, 5, 1.0f);
  // a final LSE of the size the forward makes for these inputs (log of about L / 2 keys), and
  // small row sums: the backward's exponentials stay in range
  random_fill(lse, n * H, 6, 0.5f, std::log(static_cast<float>(L) / 2));
  random_fill(dsum, n * H, 7, 0.1f);
  dcpp::kernels::attention_params<T> a;
  a.q = q, a.k = k, a.v = v, a.o = of, a.lse = lse, a.out = o, a.dout = dout;
  a.lse_final = lse, a.dsum = dsum, a.dq = dq, a.dk = dk, a.dv = dv;
  a.tokens = tokens, a.heads = H, a.kv_heads = HK, a.scale = 0.088f;
  const std::int32_t* d_real = upload(real);
  a.layout = {upload(offset), d_real, d_real, SEQ};
  using cfg = dcpp::kernels::attention_tile<DQK, DV, T>;
  const auto forward_tiles = tiles(cfg::forward_rows), backward_tiles = tiles(cfg::backward_rows);
  const double pairs = SEQ * (static_cast<double>(L) * (L + 1) / 2); // diagonal step
  const double half_pairs = SEQ * (static_cast<double>(L) * L / 2);  // lower / upper steps
  auto row = [&](const char* what, double flops, float ms, double predicted) {
    char name[64], prediction[32] = "-";
    std::snprintf(name, sizeof name, "attn %s %d/%d", what, DQK, DV);
    if (predicted > 0)
      std::snprintf(prediction, sizeof prediction, "%.0f", predicted);
    std::printf("%-34s %10lld %10.3f %10.1f %9.1f%% %14s\n", name, static_cast<long long>(tokens),
                ms, flops / ms / 1e9, 100 * flops / ms / 1e-3 / tc_peak, prediction);
    rows.push_back({name, static_cast<long long>(tokens), ms, flops / ms / 1e9,
                    100 * flops / ms / 1e-3 / tc_peak, predicted, "TFLOP/s"});
  };
  struct step {
    const char* name;
    dcpp::kernels::ring_step_kind kind;
    double pairs;
  };
  a.tiles = forward_tiles;
  for (const step st : {step{"fwd diagonal", dcpp::kernels::ring_step_kind::diagonal, pairs},
                        step{"fwd lower", dcpp::kernels::ring_step_kind::lower, half_pairs}}) {
    a.kind = st.kind;
    const float ms = time_ms(
        [&] { BENCH_CHECK((dcpp::kernels::attention_forward<DQK, DV, T>(a, nullptr))); }, 10);
    row(st.name, 2.0 * (DQK + DV) * H * st.pairs, ms,
        st.kind == dcpp::kernels::ring_step_kind::diagonal ? predicted_forward : 0);
  }
  a.kind = dcpp::kernels::ring_step_kind::diagonal;
  a.tiles = backward_tiles;
  const float ms = time_ms(
      [&] {
        BENCH_CHECK((dcpp::kernels::attention_backward<DQK, DV, T>(a, backward_tiles, nullptr)));
      },
      10);
  row("bwd diagonal", 2.0 * (3 * DQK + 2 * DV) * H * pairs, ms, predicted_backward);
  for (void* p : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v),
                  static_cast<void*>(o), static_cast<void*>(dout), static_cast<void*>(of),
                  static_cast<void*>(lse), static_cast<void*>(dsum), static_cast<void*>(dq),
                  static_cast<void*>(dk), static_cast<void*>(dv)})
    BENCH_CHECK(cudaFree(p));
}

} // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--json PATH]\n", argv[0]);
      return 2;
    }
  }
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
  random_fill(x, n, 11, 1.0f);
  random_fill(dy, n, 12, 1.0f);
  random_fill(w, static_cast<std::size_t>(channels) * 4, 13, 0.5f);
  random_fill(b, static_cast<std::size_t>(channels), 14, 0.5f);

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
  rows.push_back({"conv1d fwd W=4 bf16 C=4096", static_cast<long long>(tokens), fwd,
                  bytes_fwd / fwd / 1e6, 100 * bytes_fwd / fwd / 1e-3 / peak, 0, "GB/s"});
  const double bytes_bwd = 3.0 * static_cast<double>(n) * sizeof(T);
  const float bwd =
      time_ms([&] { BENCH_CHECK((dcpp::kernels::conv1d_backward<4, T>(p, nullptr))); }, 20);
  std::printf("%-28s %10lld %10.3f %12.1f %9.1f%%\n", "conv1d bwd W=4 bf16 C=4096",
              static_cast<long long>(tokens), bwd, bytes_bwd / bwd / 1e6,
              100 * bytes_bwd / bwd / 1e-3 / peak);
  rows.push_back({"conv1d bwd W=4 bf16 C=4096", static_cast<long long>(tokens), bwd,
                  bytes_bwd / bwd / 1e6, 100 * bytes_bwd / bwd / 1e-3 / peak, 0, "GB/s"});

  // Ring attention: one step of each kind on the diagonal's geometry (cp = 1: every sequence's
  // two halves on this GPU), bf16, 16 query heads, GQA 4:1, 8 samples of 4,096 tokens, for every
  // head shape; beside docs/kernels.md's H100 predictions where it makes one (D = 128).
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const double per_sm_clock = prop.major >= 9 ? 4096.0 : 2048.0; // dense bf16 flops/clk/SM
  const double tc_peak = per_sm_clock * prop.multiProcessorCount * clock_khz * 1e3;
  std::printf("\ntensor-core peak (dense bf16, %.0f flops/clk/SM) %.0f TFLOP/s\n", per_sm_clock,
              tc_peak / 1e12);
  std::printf("%-34s %10s %10s %10s %10s %14s\n", "kernel", "tokens", "ms", "TFLOP/s", "of peak",
              "H100 predicted");
  bench_attention<64, 64>(tc_peak, 0, 0);
  bench_attention<96, 96>(tc_peak, 0, 0);
  bench_attention<128, 128>(tc_peak, 230, 210); // docs/kernels.md, 4k tokens
  bench_attention<192, 128>(tc_peak, 0, 0);
  bench_attention<256, 256>(tc_peak, 0, 0);
  if (json != nullptr) {
    // written whole to a temporary file, then renamed over the target: never a partial report
    const std::string tmp = std::string(json) + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "bench_kernels_gpu: cannot write %s\n", json);
      return 1;
    }
    std::fprintf(f, "{\"device\": \"%s\", \"rows\": [\n", prop.name);
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::fprintf(f,
                   "  {\"kernel\": \"%s\", \"tokens\": %lld, \"ms\": %.6g, \"rate\": %.6g, "
                   "\"unit\": \"%s\", \"of_peak_percent\": %.4g, \"predicted\": %.6g}%s\n",
                   rows[i].kernel.c_str(), rows[i].tokens, rows[i].ms, rows[i].rate, rows[i].unit,
                   rows[i].of_peak, rows[i].predicted, i + 1 < rows.size() ? "," : "");
    const bool written = std::fprintf(f, "]}\n") > 0 && std::fflush(f) == 0 && !std::ferror(f);
    if (std::fclose(f) != 0 || !written || std::rename(tmp.c_str(), json) != 0) {
      std::remove(tmp.c_str());
      std::fprintf(stderr, "bench_kernels_gpu: writing %s failed\n", json);
      return 1;
    }
  }
  return 0;
}
