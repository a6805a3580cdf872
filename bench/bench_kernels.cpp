// Kernel benchmark on the CPU: the kernels' own source through the host launcher, against a
// plain C++ loop computing the same thing and against copying the same bytes (the memory bound
// of this machine). GPU numbers come from bench_kernels_gpu (docs/kernels.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "dcpp/attention/ring.hpp"
#include "dcpp/comm/local.hpp"
#include "dcpp/conv/conv1d.hpp"
#include "dcpp/loss/token_mean.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

template <class F>
double best_ms(int repeats, F&& f) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto start = clock_type::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double, std::milli>(clock_type::now() - start).count());
  }
  return best;
}

double copy_ms(std::size_t bytes, int repeats) {
  std::vector<unsigned char> a(bytes, 1), b(bytes);
  return best_ms(repeats, [&] { std::memcpy(b.data(), a.data(), bytes); });
}

void conv_rows(std::int64_t tokens, int channels, int repeats, unsigned workers) {
  constexpr int W = 4;
  std::vector<float> x(static_cast<std::size_t>(tokens * channels)), y(x.size()), dy(x.size()),
      dx(x.size()), w(static_cast<std::size_t>(channels * W), 0.25f),
      b(static_cast<std::size_t>(channels), 0.1f), dw(w.size()), db(b.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i % 97) * 0.01f, dy[i] = static_cast<float>(i % 89) * 0.01f;
  std::vector<std::int32_t> cu{0};
  while (cu.back() < tokens) // sequences of 1000 tokens
    cu.push_back(static_cast<std::int32_t>(std::min<std::int64_t>(cu.back() + 1000, tokens)));
  const auto layout = dcpp::conv1d_layout::from_cu_seqlens(cu, tokens);
  dcpp::kernels::conv1d_params<float> p;
  p.x = x.data(), p.weight = w.data(), p.bias = b.data(), p.y = y.data(), p.dy = dy.data();
  p.dx = dx.data(), p.dweight = dw.data(), p.dbias = db.data();
  p.tokens = tokens, p.channels = channels, p.silu = true;
  const dcpp::simt::host_launch_options options{.workers = workers};
  const double fwd = best_ms(repeats, [&] { dcpp::conv1d_forward_on_host<W>(p, layout, options); });
  const double bwd =
      best_ms(repeats, [&] { dcpp::conv1d_backward_on_host<W>(p, layout, nullptr, options); });
  // Plain loop: the same forward, one thread, no launcher.
  const double loop = best_ms(repeats, [&] {
    for (std::size_t s = 0; s + 1 < cu.size(); ++s)
      for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t)
        for (int c = 0; c < channels; ++c) {
          float acc = b[static_cast<std::size_t>(c)];
          for (int k = 0; k < W && t - k >= cu[s]; ++k)
            acc += w[static_cast<std::size_t>(c * W + k)] *
                   x[static_cast<std::size_t>((t - k) * channels + c)];
          y[static_cast<std::size_t>(t * channels + c)] = acc / (1.0f + std::exp(-acc));
        }
  });
  const auto bytes = static_cast<std::size_t>(tokens * channels) * sizeof(float);
  fmt::print("{:<22} {:>8} {:>8} {:>12.2f} {:>12.2f} {:>12.2f} {:>12.3f}\n", "conv1d fwd W=4 fp32",
             tokens, channels, fwd, loop, copy_ms(2 * bytes, repeats),
             fwd / 1e3 > 0 ? tokens / fwd / 1e3 : 0);
  fmt::print("{:<22} {:>8} {:>8} {:>12.2f} {:>12} {:>12.2f} {:>12.3f}\n", "conv1d bwd W=4 fp32",
             tokens, channels, bwd, "-", copy_ms(3 * bytes, repeats),
             static_cast<double>(tokens) / bwd / 1e3);
}

void loss_rows(std::int64_t tokens, int heads, int repeats, unsigned workers) {
  std::vector<float> losses(static_cast<std::size_t>(tokens * heads));
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(tokens), 1);
  for (std::size_t i = 0; i < losses.size(); ++i)
    losses[i] = static_cast<float>(i % 101) * 0.03f;
  std::vector<std::int32_t> cu{0};
  while (cu.back() < tokens)
    cu.push_back(static_cast<std::int32_t>(std::min<std::int64_t>(cu.back() + 1000, tokens)));
  const int sequences = static_cast<int>(cu.size()) - 1;
  std::vector<double> sums(static_cast<std::size_t>(sequences * heads)),
      totals(2 * static_cast<std::size_t>(heads));
  std::vector<std::int64_t> counts(sums.size());
  dcpp::kernels::token_reduce_params<float, double> p{
      losses.data(), tokens,        mask.data(),  0, cu.data(), sequences, heads,
      sums.data(),   counts.data(), totals.data()};
  const double kernel =
      best_ms(repeats, [&] { dcpp::token_reduce_on_host(p, tokens, {.workers = workers}); });
  const double loop = best_ms(repeats, [&] {
    for (int h = 0; h < heads; ++h) {
      double s = 0;
      for (std::int64_t t = 0; t < tokens; ++t)
        s += mask[static_cast<std::size_t>(t)] ? losses[static_cast<std::size_t>(h * tokens + t)]
                                               : 0.0;
      totals[static_cast<std::size_t>(h)] = s;
    }
  });
  const auto bytes = static_cast<std::size_t>(tokens) * (heads * sizeof(float) + 1);
  fmt::print("{:<22} {:>8} {:>8} {:>12.2f} {:>12.2f} {:>12.2f} {:>12.3f}\n",
             fmt::format("token reduce {} heads", heads), tokens, "-", kernel, loop,
             copy_ms(bytes, repeats), static_cast<double>(tokens) / kernel / 1e3);
}

void attention_rows(int sequence, int sequences, int repeats, unsigned workers) {
  constexpr int H = 4, HK = 2, D = 64;
  std::vector<std::int32_t> cu{0};
  for (int s = 0; s < sequences; ++s)
    cu.push_back(cu.back() + sequence);
  const auto part = dcpp::ring_partition::padded(cu, 1, 0);
  const auto n = static_cast<std::size_t>(part.tokens());
  std::vector<dcpp::bfloat16> q(n * H * D), k(n * HK * D), v(k.size()), o(q.size()), dout(q.size()),
      dq(q.size()), dk(k.size()), dv(k.size());
  for (std::size_t i = 0; i < q.size(); ++i)
    q[i] = dcpp::from_float<dcpp::bfloat16>(static_cast<float>(i % 13) * 0.05f - 0.3f),
    dout[i] = dcpp::from_float<dcpp::bfloat16>(static_cast<float>(i % 7) * 0.1f - 0.3f);
  for (std::size_t i = 0; i < k.size(); ++i)
    k[i] = dcpp::from_float<dcpp::bfloat16>(static_cast<float>(i % 11) * 0.05f - 0.25f),
    v[i] = dcpp::from_float<dcpp::bfloat16>(static_cast<float>(i % 5) * 0.2f - 0.4f);
  std::vector<float> lse(n * H);
  const dcpp::attention_shape shape{H, HK, D, 0.0f};
  const dcpp::host_attention policy{{.workers = workers}};
  const dcpp::ring_options options{.launch = {.workers = workers}};
  double fwd = 0, bwd = 0;
  dcpp::run_local(1, [&](dcpp::local_communicator& comm) {
    fwd = best_ms(repeats, [&] {
      dcpp::ring_attention_forward<dcpp::local_communicator, dcpp::bfloat16>(
          comm, part, shape, q, k, v, o, lse, policy, options);
    });
    bwd = best_ms(repeats, [&] {
      dcpp::ring_attention_backward<dcpp::local_communicator, dcpp::bfloat16>(
          comm, part, shape, q, k, v, o, lse, dout, dq, dk, dv, policy, options);
    });
  });
  // Plain loop: the same causal forward in fp32, one thread, no launcher, no tiles.
  std::vector<float> of(q.size()), score(static_cast<std::size_t>(sequence));
  const double loop = best_ms(repeats, [&] {
    for (int s = 0; s < sequences; ++s)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < sequence; ++i) {
          const std::size_t qi = (static_cast<std::size_t>(s * sequence + i) * H + h) * D;
          float mx = -1e30f, sum = 0;
          for (int j = 0; j <= i; ++j) {
            const std::size_t kj = (static_cast<std::size_t>(s * sequence + j) * HK + h / 2) * D;
            float dot = 0;
            for (int d = 0; d < D; ++d)
              dot += dcpp::to_float(q[qi + d]) * dcpp::to_float(k[kj + d]);
            score[static_cast<std::size_t>(j)] = dot * 0.125f;
            mx = std::max(mx, dot * 0.125f);
          }
          for (int d = 0; d < D; ++d)
            of[qi + d] = 0;
          for (int j = 0; j <= i; ++j) {
            const float w = std::exp(score[static_cast<std::size_t>(j)] - mx);
            sum += w;
            const std::size_t kj = (static_cast<std::size_t>(s * sequence + j) * HK + h / 2) * D;
            for (int d = 0; d < D; ++d)
              of[qi + d] += w * dcpp::to_float(v[kj + d]);
          }
          for (int d = 0; d < D; ++d)
            of[qi + d] /= sum;
        }
  });
  const auto tokens = static_cast<std::int64_t>(n);
  fmt::print("{:<22} {:>8} {:>8} {:>12.2f} {:>12.2f} {:>12} {:>12.3f}\n", "attn fwd bf16 D=64",
             tokens, "-", fwd, loop, "-", static_cast<double>(tokens) / fwd / 1e3);
  fmt::print("{:<22} {:>8} {:>8} {:>12.2f} {:>12} {:>12} {:>12.3f}\n", "attn bwd bf16 D=64", tokens,
             "-", bwd, "-", "-", static_cast<double>(tokens) / bwd / 1e3);
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"dcpp kernel benchmark (CPU path through the host launcher)"};
  bool quick = false;
  int repeats = 3;
  unsigned workers = 2;
  app.add_flag("--quick", quick, "smaller sizes");
  app.add_option("--repeats", repeats, "runs per timing, best kept")->check(CLI::Range(1, 100));
  app.add_option("--workers", workers, "OS threads of the host launcher")->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);
  fmt::print("CPU path: host launcher ({} workers) vs a plain single-thread loop vs memcpy of the "
             "same bytes (this machine's memory bound); times in ms, best of {}\n",
             workers, repeats);
  fmt::print("{:<22} {:>8} {:>8} {:>12} {:>12} {:>12} {:>12}\n", "kernel", "tokens", "channels",
             "launcher", "plain loop", "memcpy", "Mtok/s");
  const std::int64_t tokens = quick ? 4096 : 32768;
  conv_rows(tokens, 256, repeats, workers);
  loss_rows(tokens * 4, 3, repeats, workers);
  attention_rows(quick ? 256 : 1024, 4, repeats, workers);
  return 0;
}
