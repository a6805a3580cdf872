// cpu_trainer: a small but real model trained with dynamic context parallelism on CPUs under
// MPI (`mpirun -np 4 cpu_trainer`). Every step: each rank's data shard -> gather lengths, plan,
// route (plan_step) -> per micro-batch, on the rank's CP group: token embedding, the varlen
// causal conv1d (CP halo), causal self-attention through the ring attention kernels, an MLP, a
// head-parallel layer (a linear recurrence per head over whole sequences, between cp2hp and
// hp2cp), an output projection, cross-entropy with the loss-token reduction -> backward through
// all of it -> all-reduce of the gradients -> SGD with momentum. fp32 throughout; the kernels
// run through the host launcher. The task: after two random tokens, each token is the one two
// places back plus 3 (modulo the vocabulary), so the next token is predictable from context (the
// conv's reach, or attention) but not from the current token alone; the loss falls from ln 16
// = 2.77 as the model learns it. The same run on one rank gives the same losses and weights up to
// fp32 summation order: that is the proof that dynamic CP changes nothing but speed
// (tests/examples/test_cpu_trainer.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <dcpp/attention/ring.hpp>
#include <dcpp/comm/mpi.hpp>
#include <dcpp/conv/conv1d.hpp>
#include <dcpp/dcpp.hpp>
#include <dcpp/io/guarded_main.hpp>
#include <dcpp/loss/token_mean.hpp>
#include <dcpp/route/head_parallel.hpp>
#include <dcpp/route/router.hpp>
#include <dcpp/simt/host_launcher.hpp>

#include "trainer/common.hpp" // model shape, parameters, data, command line, report
#include "trainer/layers.hpp" // the head-parallel layer's recurrence (shared with gpu_trainer)

namespace {

using namespace trainer;

// Y[n x m] = X[n x k] W[k x m]
void matmul(const float* x, const float* w, float* y, std::int64_t n, int k, int m) {
  for (std::int64_t i = 0; i < n; ++i) {
    float* yi = y + i * m;
    std::fill(yi, yi + m, 0.0f);
    for (int j = 0; j < k; ++j) {
      const float a = x[i * k + j];
      const float* wj = w + static_cast<std::ptrdiff_t>(j) * m;
      for (int c = 0; c < m; ++c)
        yi[c] += a * wj[c];
    }
  }
}
// dX[n x k] += dY[n x m] W^T
void matmul_dx(const float* dy, const float* w, float* dx, std::int64_t n, int k, int m) {
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) {
      float s = 0;
      for (int c = 0; c < m; ++c)
        s += dy[i * m + c] * w[static_cast<std::ptrdiff_t>(j) * m + c];
      dx[i * k + j] += s;
    }
}
// dW[k x m] += X^T dY
void matmul_dw(const float* x, const float* dy, float* dw, std::int64_t n, int k, int m) {
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) {
      const float a = x[i * k + j];
      if (a == 0.0f)
        continue;
      for (int c = 0; c < m; ++c)
        dw[static_cast<std::ptrdiff_t>(j) * m + c] += a * dy[i * m + c];
    }
}

//! A 1-D launch of `n` threads through the host launcher.
template <class Body>
void host_launch_1d(std::int64_t n, Body&& body) {
  if (n <= 0)
    return;
  constexpr unsigned block = 128;
  dcpp::simt::host_launch(
      {{static_cast<unsigned>((n + block - 1) / block), 1, 1}, {block, 1, 1}, 0},
      std::forward<Body>(body));
}

struct step_result {
  double loss_sum = 0, loss_count = 0;
};

//! Forward and backward of one micro-batch on this rank's buffer; adds the parameter gradients
//! (for a loss normalised by `scale` = 1 / global loss tokens) to `grad`. `group` is the
//! micro-batch's CP group, `world` the communicator its layout's ranks refer to.
template <class Batch>
step_result run_microbatch(dcpp::mpi_communicator& world, dcpp::mpi_communicator& group,
                           const Batch& batch, const parameters& p, parameters& grad, float scale) {
  const auto& layout = batch.layout;
  const std::int64_t n = batch.tokens();
  const auto N = static_cast<std::size_t>(n);
  const auto& ids = batch.template get<dcpp::fields::token_ids>();
  const auto& labels = batch.template get<dcpp::fields::labels>();
  const auto& mask = batch.template get<dcpp::fields::loss_mask>();

  // ---- forward ----
  std::vector<float> x0(N * dim), c(N * dim), x1(N * dim);
  for (std::size_t i = 0; i < N; ++i)
    std::copy_n(p(p.embed) + static_cast<std::size_t>(ids[i]) * dim, dim, x0.begin() + i * dim);
  // [conv-halo]
  // conv1d with the CP halo (the W-1 tokens before each zigzag chunk come from their owner)
  const auto conv_layout = dcpp::conv1d_layout::from_thd(layout, width);
  const auto halo_plan = dcpp::conv1d_halo_plan::make(layout, width);
  const auto halo = dcpp::exchange_halo(group, halo_plan, std::span<const float>(x0), dim);
  dcpp::kernels::conv1d_params<float> cp;
  cp.x = x0.data(), cp.weight = p(p.conv_w), cp.bias = p(p.conv_b), cp.halo_x = halo.data();
  cp.y = c.data(), cp.tokens = n, cp.channels = dim, cp.silu = true;
  dcpp::conv1d_forward_on_host(width, cp, conv_layout);
  // [conv-halo]
  for (std::size_t i = 0; i < N * dim; ++i)
    x1[i] = x0[i] + c[i];
  // [attention]
  // attention through the ring
  const auto part = dcpp::ring_partition::from(layout);
  const dcpp::attention_shape shape{1, 1, dim, 0.0f};
  std::vector<float> q(N * dim), k(N * dim), v(N * dim), o(N * dim), lse(N), x2(N * dim);
  matmul(x1.data(), p(p.wq), q.data(), n, dim, dim);
  matmul(x1.data(), p(p.wk), k.data(), n, dim, dim);
  matmul(x1.data(), p(p.wv), v.data(), n, dim, dim);
  dcpp::ring_attention_forward<dcpp::mpi_communicator, float>(group, part, shape, q, k, v, o, lse);
  // [attention]
  matmul(o.data(), p(p.wo), x2.data(), n, dim, dim);
  for (std::size_t i = 0; i < N * dim; ++i)
    x2[i] += x1[i];
  // MLP
  std::vector<float> u(N * hidden), h(N * hidden), x3(N * dim);
  matmul(x2.data(), p(p.w1), u.data(), n, dim, hidden);
  for (std::size_t i = 0; i < u.size(); ++i)
    h[i] = std::max(0.0f, u[i]);
  matmul(h.data(), p(p.w2), x3.data(), n, hidden, dim);
  for (std::size_t i = 0; i < N * dim; ++i)
    x3[i] += x2[i];
  // [head-parallel]
  // the head-parallel layer: whole sequences with a share of the heads (cp2hp), the recurrence
  // per head, back to the zigzag chunks (hp2cp); x4 = x3 + its output
  const dcpp::head_shape heads{scan_heads, scan_head_dim};
  const dcpp::head_split split{scan_heads, layout.cp};
  const auto H = static_cast<std::size_t>(dcpp::hp_elements(layout, heads));
  std::vector<float> x3_hp(H), s_hp(H), y_hp(H), y(N * dim), x4(N * dim);
  dcpp::cp2hp(world, layout, heads, std::span<const float>(x3), std::span<float>(x3_hp));
  kernels::scan_params sp;
  sp.x = x3_hp.data(), sp.s = s_hp.data(), sp.y = y_hp.data(), sp.gate = p(p.gate);
  sp.cu_padded = layout.cu_seqlens_padded.data(), sp.cu_real = layout.cu_seqlens.data();
  sp.sequences = static_cast<int>(layout.samples.size()), sp.heads_here = split.count();
  sp.first_head = split.first(layout.rank_in_group), sp.head_dim = scan_head_dim;
  const std::int64_t scan_threads = std::int64_t{sp.sequences} * sp.heads_here * scan_head_dim;
  host_launch_1d(scan_threads, [&sp](auto& ctx) { kernels::scan_forward_body(ctx, sp); });
  dcpp::hp2cp(world, layout, heads, std::span<const float>(y_hp), std::span<float>(y));
  for (std::size_t i = 0; i < N * dim; ++i)
    x4[i] = x3[i] + y[i];
  // [head-parallel]
  // output projection and cross-entropy
  std::vector<float> logits(N * vocab), token_loss(N, 0.0f), dlogits(N * vocab, 0.0f);
  matmul(x4.data(), p(p.out), logits.data(), n, dim, vocab);
  for (std::size_t i = 0; i < N; ++i) {
    if (mask[i] == 0)
      continue;
    const float* l = logits.data() + i * vocab;
    const float mx = *std::max_element(l, l + vocab);
    double sum = 0;
    for (int c2 = 0; c2 < vocab; ++c2)
      sum += std::exp(static_cast<double>(l[c2] - mx));
    token_loss[i] = static_cast<float>(std::log(sum) + mx - l[labels[i]]);
    for (int c2 = 0; c2 < vocab; ++c2)
      dlogits[i * vocab + static_cast<std::size_t>(c2)] =
          static_cast<float>(std::exp(static_cast<double>(l[c2] - mx)) / sum) * scale;
    dlogits[i * vocab + static_cast<std::size_t>(labels[i])] -= scale;
  }
  // the loss-token reduction kernel: per-sample masked sums and counts, then the rank's totals
  step_result r;
  {
    const int sequences = static_cast<int>(layout.cu_seqlens_padded.size()) - 1;
    std::vector<std::int32_t> local_cu(layout.cu_seqlens_padded.size());
    for (std::size_t s = 0; s < local_cu.size(); ++s)
      local_cu[s] = layout.cu_seqlens_padded[s] / layout.cp;
    std::vector<double> sums(static_cast<std::size_t>(sequences)), totals(2);
    std::vector<std::int64_t> counts(static_cast<std::size_t>(sequences));
    dcpp::kernels::token_reduce_params<float, double> tr{token_loss.data(),
                                                         n,
                                                         mask.data(),
                                                         0,
                                                         local_cu.data(),
                                                         sequences,
                                                         1,
                                                         sums.data(),
                                                         counts.data(),
                                                         totals.data()};
    dcpp::token_reduce_on_host(tr, n);
    r.loss_sum = totals[0], r.loss_count = totals[1];
  }

  // ---- backward ----
  std::vector<float> dx4(N * dim, 0.0f), dh(N * hidden, 0.0f), dx2(N * dim, 0.0f);
  matmul_dw(x4.data(), dlogits.data(), grad(grad.out), n, dim, vocab);
  matmul_dx(dlogits.data(), p(p.out), dx4.data(), n, dim, vocab);
  // [head-parallel-backward]
  // the head-parallel layer backward: the output's gradient to whole sequences per head (cp2hp),
  // the recurrence reversed, back (hp2cp; a head several ranks hold was computed alike by each,
  // so the first holder's is taken, and only it adds the gate's gradient); dx3 = dx4 + that
  std::vector<float> dy_hp(H), dx_hp(H), dscan(N * dim), dx3(N * dim);
  std::vector<float> partial(static_cast<std::size_t>(scan_threads));
  dcpp::cp2hp(world, layout, heads, std::span<const float>(dx4), std::span<float>(dy_hp));
  sp.dy = dy_hp.data(), sp.dx = dx_hp.data(), sp.dgate_partial = partial.data();
  host_launch_1d(scan_threads, [&sp](auto& ctx) { kernels::scan_backward_body(ctx, sp); });
  if (split.first_holder(layout.rank_in_group))
    host_launch_1d(sp.heads_here, [&](auto& ctx) {
      kernels::scan_gate_grad_body(ctx, partial.data(), grad(grad.gate), sp.sequences,
                                   sp.heads_here, sp.first_head, scan_head_dim);
    });
  dcpp::hp2cp(world, layout, heads, std::span<const float>(dx_hp), std::span<float>(dscan));
  for (std::size_t i = 0; i < N * dim; ++i)
    dx3[i] = dx4[i] + dscan[i];
  // [head-parallel-backward]
  matmul_dw(h.data(), dx3.data(), grad(grad.w2), n, hidden, dim);
  matmul_dx(dx3.data(), p(p.w2), dh.data(), n, hidden, dim);
  for (std::size_t i = 0; i < dh.size(); ++i)
    dh[i] = u[i] > 0.0f ? dh[i] : 0.0f;
  matmul_dw(x2.data(), dh.data(), grad(grad.w1), n, dim, hidden);
  dx2 = dx3; // residual
  matmul_dx(dh.data(), p(p.w1), dx2.data(), n, dim, hidden);
  std::vector<float> dout(N * dim, 0.0f), dq(N * dim), dk(N * dim), dv(N * dim);
  matmul_dw(o.data(), dx2.data(), grad(grad.wo), n, dim, dim);
  matmul_dx(dx2.data(), p(p.wo), dout.data(), n, dim, dim);
  dcpp::ring_attention_backward<dcpp::mpi_communicator, float>(group, part, shape, q, k, v, o, lse,
                                                               dout, dq, dk, dv);
  std::vector<float> dx1 = dx2; // residual
  matmul_dw(x1.data(), dq.data(), grad(grad.wq), n, dim, dim);
  matmul_dw(x1.data(), dk.data(), grad(grad.wk), n, dim, dim);
  matmul_dw(x1.data(), dv.data(), grad(grad.wv), n, dim, dim);
  matmul_dx(dq.data(), p(p.wq), dx1.data(), n, dim, dim);
  matmul_dx(dk.data(), p(p.wk), dx1.data(), n, dim, dim);
  matmul_dx(dv.data(), p(p.wv), dx1.data(), n, dim, dim);
  // conv backward: the halo rows' gradients go back to their owners first
  std::vector<float> dx0_conv(N * dim),
      halo_dx(static_cast<std::size_t>(conv_layout.halo_rows) * dim),
      dw(static_cast<std::size_t>(dim) * width), db(dim);
  cp.dy = dx1.data(), cp.dx = dx0_conv.data(), cp.halo_dx = halo_dx.data();
  cp.dweight = dw.data(), cp.dbias = db.data();
  dcpp::conv1d_halo_gradients_on_host(width, cp, conv_layout);
  const auto incoming =
      dcpp::collect_halo_gradients(group, halo_plan, std::span<const float>(halo_dx), dim);
  dcpp::conv1d_backward_on_host(width, cp, conv_layout, &incoming);
  for (std::size_t i = 0; i < dw.size(); ++i)
    grad(grad.conv_w)[i] += dw[i];
  for (std::size_t i = 0; i < db.size(); ++i)
    grad(grad.conv_b)[i] += db[i];
  for (std::size_t i = 0; i < N; ++i) {
    if (!batch.is_real[i])
      continue;
    float* e = grad(grad.embed) + static_cast<std::size_t>(ids[i]) * dim;
    for (int j = 0; j < dim; ++j)
      e[j] += dx1[i * dim + static_cast<std::size_t>(j)] +
              dx0_conv[i * dim + static_cast<std::size_t>(j)];
  }
  return r;
}

} // namespace

int main(int argc, char** argv) {
  dcpp::mpi_environment mpi(&argc, &argv);
  auto world = dcpp::mpi_communicator::world();
  CLI::App app{"Train a small model with dynamic context parallelism on CPUs under MPI"};
  trainer::options o;
  o.add_to(app);
  if (const auto stop = trainer::parse_on_every_rank(app, argc, argv, world, "cpu_trainer"))
    return *stop;
  return dcpp::guarded_main(fmt::format("cpu_trainer rank {}: ", world.rank()), [&]() -> int {
    trainer::check_start(world, o);
    if (!o.calibrate_lengths.empty()) {
      // [calibrate]
      parameters params, grad;
      initialise(params, o.seed);
      trainer::calibrate(world, o, "cpu_trainer", [&](auto& router, const shard_type& shard) {
        for (std::size_t mb = 0; mb < router.microbatches(); ++mb) {
          const auto batch = router.dispatch(mb, shard);
          if (batch.layout.idle())
            continue;
          auto group = router.group(mb);
          run_microbatch(world, group, batch, params, grad, 1.0f);
        }
      });
      // [calibrate]
      return 0;
    }
    const dcpp::plan_options options = o.plan_options_for(world.size());
    const std::int64_t budget = options.max_tokens_per_rank;
    const std::int64_t longest = dcpp::max_plannable_length(options); // a sample's most tokens
    dcpp::planner<> planner(options);

    parameters params, grad, velocity;
    initialise(params, o.seed);
    trainer::report report(o, world.size(), budget, world.rank() == 0);
    for (int step = 0; step < o.steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      const shard_type shard =
          make_shard(step, o.samples, o.seed, world.rank(), world.size(), longest);
      // [step]
      // global loss tokens first: every token's gradient is scaled by 1 / T_global
      const std::vector<double> count_totals{0.0, loss_tokens(shard)};
      const auto counted = dcpp::global_token_mean(world, std::span<const double>(count_totals), 1);
      const auto scale = static_cast<float>(counted.gradient_scale[0]);

      auto router = dcpp::plan_step(planner, world, shard);
      std::fill(grad.data.begin(), grad.data.end(), 0.0f);
      double loss_sum = 0, loss_count = 0;
      std::int64_t tokens = 0;
      for (std::size_t mb = 0; mb < router.microbatches(); ++mb) {
        const auto batch = router.dispatch(mb, shard);
        if (batch.layout.idle())
          continue;
        auto group = router.group(mb);
        const auto r = run_microbatch(world, group, batch, params, grad, scale);
        loss_sum += r.loss_sum, loss_count += r.loss_count;
        tokens += batch.tokens();
      }
      world.all_reduce(std::span<float>(grad.data), dcpp::reduce_op::sum);
      // [step]
      const std::vector<double> totals{loss_sum, loss_count};
      const auto mean = dcpp::global_token_mean(world, std::span<const double>(totals), 1);
      trainer::check_step(step, mean, counted, o.lr);
      for (std::size_t i = 0; i < params.data.size(); ++i) {
        velocity.data[i] = static_cast<float>(o.momentum) * velocity.data[i] + grad.data[i];
        params.data[i] -= static_cast<float>(o.lr) * velocity.data[i];
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::vector<double> tok{static_cast<double>(tokens)};
      world.all_reduce(std::span<double>(tok), dcpp::reduce_op::sum);
      report.step(step, mean.mean[0], mean.counts[0], tok[0], seconds, router.get_plan());
    }
    report.finish(params.data);
    return 0;
  });
}
