// The GPU trainer's layer kernels (examples/trainer/layers.hpp) and the row gather-sum run on
// the CPU through the host launcher, against plain loops in double precision: seeded random
// inputs at awkward sizes (not multiples of the 16x16 tile), every stride pattern the trainer
// uses, padding tokens and out-of-range ids.
#include "../support.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "dcpp/kernels/conv/causal_conv1d.hpp"
#include "dcpp/simt/host_launcher.hpp"
#include "trainer/layers.hpp"

namespace {

namespace k = trainer::kernels;

std::vector<float> random_floats(std::size_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v)
    x = static_cast<float>(u(rng));
  return v;
}

dcpp::simt::launch_shape linear(std::int64_t n) {
  return {
      {static_cast<unsigned>(std::max<std::int64_t>(1, (n + 127) / 128)), 1, 1}, {128, 1, 1}, 0};
}

// Y = A B with A, B given by element functions; returns max |gemm - reference| / (1 + |ref|).
template <class A, class B>
double run_gemm(std::int64_t m, std::int64_t n, std::int64_t kk, const k::gemm_params& p, A a, B b,
                const std::vector<float>& before) {
  dcpp::simt::host_launch(
      {{static_cast<unsigned>((n + 15) / 16), static_cast<unsigned>((m + 15) / 16), 1},
       {16, 16, 1},
       k::gemm_shared_bytes},
      [&p](dcpp::simt::host_context& ctx) { k::gemm_body(ctx, p); });
  double worst = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double ref = p.accumulate ? before[static_cast<std::size_t>(i * n + j)] : 0.0;
      for (std::int64_t l = 0; l < kk; ++l)
        ref += static_cast<double>(a(i, l)) * b(l, j);
      worst = std::max(worst, std::abs(p.c[i * n + j] - ref) / (1.0 + std::abs(ref)));
    }
  return worst;
}

} // namespace

TEST_CASE("trainer layers: gemm in the three stride patterns of the trainer") {
  std::mt19937_64 rng(2026);
  const std::vector<std::array<std::int64_t, 3>> shapes{
      {1, 1, 1}, {37, 64, 16}, {131, 19, 45}, {17, 128, 64}, {200, 33, 7}};
  for (const auto& [rows, kdim, mdim] : shapes) {
    INFO("rows " << rows << " k " << kdim << " m " << mdim);
    const auto x = random_floats(static_cast<std::size_t>(rows * kdim), rng);
    const auto w = random_floats(static_cast<std::size_t>(kdim * mdim), rng);
    const auto dy = random_floats(static_cast<std::size_t>(rows * mdim), rng);
    for (const bool acc : {false, true}) {
      CAPTURE(acc);
      // Y[rows x m] = X W
      auto y = random_floats(static_cast<std::size_t>(rows * mdim), rng);
      const auto y0 = y;
      const k::gemm_params fwd{x.data(), kdim, 1,    w.data(), mdim, 1,
                               y.data(), rows, mdim, kdim,     acc};
      CHECK(run_gemm(
                rows, mdim, kdim, fwd, [&](auto i, auto l) { return x[i * kdim + l]; },
                [&](auto l, auto j) { return w[l * mdim + j]; }, y0) < 1e-5);
      // dX[rows x k] = dY W^T
      auto dx = random_floats(static_cast<std::size_t>(rows * kdim), rng);
      const auto dx0 = dx;
      const k::gemm_params bdx{dy.data(), mdim, 1,    w.data(), 1,  mdim,
                               dx.data(), rows, kdim, mdim,     acc};
      CHECK(run_gemm(
                rows, kdim, mdim, bdx, [&](auto i, auto l) { return dy[i * mdim + l]; },
                [&](auto l, auto j) { return w[j * mdim + l]; }, dx0) < 1e-5);
      // dW[k x m] = X^T dY (inner dimension: the tokens)
      auto dw = random_floats(static_cast<std::size_t>(kdim * mdim), rng);
      const auto dw0 = dw;
      const k::gemm_params bdw{x.data(),  1,    kdim, dy.data(), mdim, 1,
                               dw.data(), kdim, mdim, rows,      acc};
      CHECK(run_gemm(
                kdim, mdim, rows, bdw, [&](auto i, auto l) { return x[l * kdim + i]; },
                [&](auto l, auto j) { return dy[l * mdim + j]; }, dw0) < 1e-5);
    }
  }
}

TEST_CASE("trainer layers: embedding, add, relu and its gradient, sgd") {
  std::mt19937_64 rng(7);
  const int vocab = 13, dim = 24;
  const std::int64_t tokens = 101;
  const auto table = random_floats(static_cast<std::size_t>(vocab * dim), rng);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
  for (auto& id : ids)
    id = static_cast<std::int32_t>(rng() % vocab);
  ids[3] = -1, ids[50] = vocab; // out of range: zero rows
  std::vector<float> x(static_cast<std::size_t>(tokens * dim), 99.0f);
  dcpp::simt::host_launch(linear(tokens * dim), [&](dcpp::simt::host_context& ctx) {
    k::embed_body(ctx, table.data(), ids.data(), x.data(), tokens, vocab, dim);
  });
  for (std::int64_t i = 0; i < tokens; ++i)
    for (int j = 0; j < dim; ++j) {
      const auto id = ids[static_cast<std::size_t>(i)];
      const float expect =
          id >= 0 && id < vocab ? table[static_cast<std::size_t>(id * dim + j)] : 0.0f;
      REQUIRE(x[static_cast<std::size_t>(i * dim + j)] == expect);
    }

  const std::int64_t n = 1000 + 37;
  const auto a = random_floats(static_cast<std::size_t>(n), rng),
             b = random_floats(static_cast<std::size_t>(n), rng);
  std::vector<float> y(static_cast<std::size_t>(n)), h(y.size()), dh = b;
  dcpp::simt::host_launch(linear(n), [&](dcpp::simt::host_context& ctx) {
    k::add_body(ctx, a.data(), b.data(), y.data(), n);
    k::relu_body(ctx, a.data(), h.data(), n);
    k::relu_grad_body(ctx, a.data(), dh.data(), n);
  });
  for (std::size_t i = 0; i < y.size(); ++i) {
    REQUIRE(y[i] == a[i] + b[i]);
    REQUIRE(h[i] == std::max(0.0f, a[i]));
    REQUIRE(dh[i] == (a[i] > 0.0f ? b[i] : 0.0f));
  }

  auto w = random_floats(static_cast<std::size_t>(n), rng), v = random_floats(y.size(), rng);
  const auto w0 = w, v0 = v;
  dcpp::simt::host_launch(linear(n), [&](dcpp::simt::host_context& ctx) {
    k::sgd_body(ctx, w.data(), a.data(), v.data(), n, 0.05f, 0.9f);
  });
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float vel = 0.9f * v0[i] + a[i];
    REQUIRE(v[i] == vel);
    REQUIRE(w[i] == w0[i] - 0.05f * vel);
  }
}

TEST_CASE("trainer layers: cross-entropy against fp64 softmax, masked and padding tokens") {
  std::mt19937_64 rng(11);
  const int vocab = 16;
  const std::int64_t tokens = 77;
  const auto logits = random_floats(static_cast<std::size_t>(tokens * vocab), rng, 6.0);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(tokens));
  std::vector<std::uint8_t> mask(labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    labels[i] = static_cast<std::int32_t>(rng() % vocab);
    mask[i] = rng() % 5 != 0 ? 1 : 0;
  }
  labels[5] = -100, mask[5] = 1; // an ignored label with the mask set: no loss, no gradient
  const float scale = 1.0f / 300.0f;
  std::vector<float> loss(labels.size(), 5.0f), dlogits(logits.size(), 5.0f);
  dcpp::simt::host_launch(linear(tokens), [&](dcpp::simt::host_context& ctx) {
    k::cross_entropy_body(ctx, logits.data(), labels.data(), mask.data(), scale, loss.data(),
                          dlogits.data(), tokens, vocab);
  });
  for (std::size_t i = 0; i < labels.size(); ++i) {
    CAPTURE(i);
    const float* l = logits.data() + i * vocab;
    if (mask[i] == 0 || labels[i] < 0) {
      CHECK(loss[i] == 0.0f);
      for (int c = 0; c < vocab; ++c)
        CHECK(dlogits[i * vocab + static_cast<std::size_t>(c)] == 0.0f);
      continue;
    }
    double sum = 0;
    for (int c = 0; c < vocab; ++c)
      sum += std::exp(static_cast<double>(l[c]));
    const double ref = std::log(sum) - l[labels[i]];
    CHECK(std::abs(loss[i] - ref) <= 2e-6 * (1 + std::abs(ref)));
    for (int c = 0; c < vocab; ++c) {
      const double g =
          scale * (std::exp(static_cast<double>(l[c])) / sum - (c == labels[i] ? 1.0 : 0.0));
      CHECK(std::abs(dlogits[i * vocab + static_cast<std::size_t>(c)] - g) <= 1e-7 * scale + 1e-9);
    }
  }
}

TEST_CASE("row gather-sum: per-segment sums in source order, accumulate or overwrite") {
  std::mt19937_64 rng(5);
  const int width = 19;
  const std::int64_t rows_in = 57, segments = 23;
  const auto in = random_floats(static_cast<std::size_t>(rows_in * width), rng);
  std::vector<std::int64_t> offsets{0}, sources;
  for (std::int64_t s = 0; s < segments; ++s) {
    const auto count = static_cast<std::int64_t>(rng() % 5); // empty segments too
    for (std::int64_t t = 0; t < count; ++t)
      sources.push_back(static_cast<std::int64_t>(rng() % rows_in));
    offsets.push_back(static_cast<std::int64_t>(sources.size()));
  }
  for (const bool acc : {false, true}) {
    auto out = random_floats(static_cast<std::size_t>(segments * width), rng);
    const auto before = out;
    dcpp::simt::host_launch(linear(segments * width), [&](dcpp::simt::host_context& ctx) {
      dcpp::kernels::row_gather_sum_body(ctx, in.data(), offsets.data(), sources.data(), out.data(),
                                         segments, width, acc);
    });
    for (std::int64_t s = 0; s < segments; ++s)
      for (int j = 0; j < width; ++j) {
        const auto at = static_cast<std::size_t>(s * width + j);
        float expect = acc ? before[at] : 0.0f; // the same order of fp32 additions
        for (auto t = offsets[static_cast<std::size_t>(s)];
             t < offsets[static_cast<std::size_t>(s) + 1]; ++t)
          expect += in[static_cast<std::size_t>(sources[static_cast<std::size_t>(t)] * width + j)];
        REQUIRE(out[at] == expect);
      }
  }
}

namespace {
//! The head-parallel layer's loss L = sum over real tokens of w . y in fp64, straight from the
//! definition (s_t = a s_{t-1} + (1 - a) x_t, y_t = g s_t per head and channel).
double scan_loss(const std::vector<double>& x, const std::vector<double>& gate,
                 const std::vector<float>& w, const std::vector<std::int32_t>& cu_padded,
                 const std::vector<std::int32_t>& cu_real, int heads_here, int first_head,
                 int head_dim) {
  const std::int64_t part = std::int64_t{heads_here} * head_dim;
  double loss = 0;
  for (std::size_t seq = 0; seq + 1 < cu_padded.size(); ++seq)
    for (std::int64_t e = 0; e < part; ++e) {
      const int head = first_head + static_cast<int>(e / head_dim);
      const double a = 1.0 - std::pow(4.0, -(head + 1));
      double s = 0;
      for (std::int64_t t = 0; t < cu_real[seq + 1] - cu_real[seq]; ++t) {
        const auto at = static_cast<std::size_t>((cu_padded[seq] + t) * part + e);
        s = a * s + (1 - a) * x[at];
        loss += w[at] * gate[static_cast<std::size_t>(head)] * s;
      }
    }
  return loss;
}
} // namespace

TEST_CASE("trainer layers: the head-parallel recurrence, forward and backward against fp64 "
          "finite differences") {
  std::mt19937_64 rng(23);
  for (const auto [heads_here, first_head, head_dim] :
       {std::array{1, 0, 3}, std::array{1, 1, 5}, std::array{2, 0, 4}, std::array{3, 2, 1}}) {
    // sequences of awkward real lengths (0 and 1 among them), padded by 0-5 rows
    std::vector<std::int32_t> cu_real{0}, cu_padded{0};
    for (const int length : {7, 0, 1, 13, 4}) {
      cu_real.push_back(cu_real.back() + length);
      cu_padded.push_back(cu_padded.back() + length + static_cast<int>(rng() % 6));
    }
    const int sequences = static_cast<int>(cu_real.size()) - 1;
    const std::int64_t part = std::int64_t{heads_here} * head_dim;
    const auto n = static_cast<std::size_t>(cu_padded.back() * part);
    const auto x = random_floats(n, rng), w = random_floats(n, rng);
    const auto gate = random_floats(static_cast<std::size_t>(first_head + heads_here), rng);
    std::vector<float> s(n, 7.0f), y(n, 7.0f), dx(n, 7.0f), dy(n);
    std::vector<float> partial(static_cast<std::size_t>(sequences * part));
    for (std::size_t i = 0; i < n; ++i) // padding rows' dy is ignored: give it garbage
      dy[i] = w[i];
    k::scan_params p;
    p.x = x.data(), p.s = s.data(), p.y = y.data(), p.dy = dy.data(), p.dx = dx.data();
    p.dgate_partial = partial.data(), p.gate = gate.data();
    p.cu_padded = cu_padded.data(), p.cu_real = cu_real.data();
    p.sequences = sequences, p.heads_here = heads_here, p.first_head = first_head;
    p.head_dim = head_dim;
    const std::int64_t threads = sequences * part;
    dcpp::simt::host_launch(linear(threads),
                            [&](dcpp::simt::host_context& ctx) { k::scan_forward_body(ctx, p); });
    dcpp::simt::host_launch(linear(threads),
                            [&](dcpp::simt::host_context& ctx) { k::scan_backward_body(ctx, p); });
    std::vector<float> dgate(gate.size(), 0.5f);
    dcpp::simt::host_launch(linear(heads_here), [&](dcpp::simt::host_context& ctx) {
      k::scan_gate_grad_body(ctx, partial.data(), dgate.data(), sequences, heads_here, first_head,
                             head_dim);
    });

    std::vector<double> xd(x.begin(), x.end()), gd(gate.begin(), gate.end());
    // forward: y against the definition; padding rows are 0
    std::vector<bool> real_row(static_cast<std::size_t>(cu_padded.back()), false);
    for (int seq = 0; seq < sequences; ++seq)
      for (std::int32_t t = 0; t < cu_real[seq + 1] - cu_real[seq]; ++t)
        real_row[static_cast<std::size_t>(cu_padded[seq] + t)] = true;
    for (int seq = 0; seq < sequences; ++seq)
      for (std::int64_t e = 0; e < part; ++e) {
        const int head = first_head + static_cast<int>(e / head_dim);
        const double a = 1.0 - std::pow(4.0, -(head + 1));
        double state = 0;
        for (std::int32_t t = 0; t < cu_padded[seq + 1] - cu_padded[seq]; ++t) {
          const auto at = static_cast<std::size_t>((cu_padded[seq] + t) * part + e);
          const bool real = real_row[static_cast<std::size_t>(cu_padded[seq] + t)];
          state = real ? a * state + (1 - a) * xd[at] : 0.0;
          REQUIRE(std::abs(s[at] - state) <= 1e-5);
          REQUIRE(std::abs(y[at] - gd[static_cast<std::size_t>(head)] * state) <= 1e-5);
        }
      }
    // backward: dL/dx and dL/dg by central differences of the fp64 loss (which is linear in x
    // and in g, so the differences are exact up to rounding)
    auto w_real = w;
    for (std::size_t i = 0; i < n; ++i)
      if (!real_row[i / static_cast<std::size_t>(part)])
        w_real[i] = 0.0f;
    const double h = 1e-3;
    for (std::size_t i = 0; i < n; ++i) {
      auto up = xd, down = xd;
      up[i] += h, down[i] -= h;
      const double fd =
          (scan_loss(up, gd, w_real, cu_padded, cu_real, heads_here, first_head, head_dim) -
           scan_loss(down, gd, w_real, cu_padded, cu_real, heads_here, first_head, head_dim)) /
          (2 * h);
      INFO("heads " << heads_here << " from " << first_head << ", element " << i);
      REQUIRE(std::abs(dx[i] - fd) <= 1e-5 * (1 + std::abs(fd)));
    }
    for (int head = 0; head < first_head + heads_here; ++head) {
      auto up = gd, down = gd;
      up[static_cast<std::size_t>(head)] += h, down[static_cast<std::size_t>(head)] -= h;
      const double fd =
          (scan_loss(xd, up, w_real, cu_padded, cu_real, heads_here, first_head, head_dim) -
           scan_loss(xd, down, w_real, cu_padded, cu_real, heads_here, first_head, head_dim)) /
          (2 * h);
      // heads below first_head are not this rank's: their gradient is left as it was
      const double expect = head < first_head ? 0.5 : 0.5 + fd;
      REQUIRE(std::abs(dgate[static_cast<std::size_t>(head)] - expect) <=
              1e-4 * (1 + std::abs(fd)));
    }
  }
}
