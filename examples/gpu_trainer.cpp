// gpu_trainer: the CPU trainer's model and loop on CUDA devices, one GPU per MPI rank
// (`mpirun -np 4 gpu_trainer`). Every step: each rank's data shard -> gather lengths and plan
// (plan_step over MPI, metadata only) -> the shard's token ids, labels and loss mask uploaded
// once and routed on the device (device_router: Thrust's CUDA policy and one NCCL all-to-all per
// micro-batch) -> per micro-batch, on the CP group's NCCL communicator: token embedding, the varlen
// causal conv1d with the CP halo exchanged by NCCL, causal self-attention through the device ring
// (K/V over NCCL, compute and transfers on two streams), an MLP, the head-parallel layer (cp2hp
// and hp2cp on the device over NCCL around a recurrence per head), an output projection,
// cross-entropy and the loss-token reduction -> the backward through all of it -> NCCL all-reduce
// of the gradients -> SGD with momentum on the device. Same model, data, flags, progress line and
// JSON log as cpu_trainer (examples/trainer/ common.hpp), so the two logs can be compared. fp32.
// Without a CUDA device it says so and exits 77 (a skip for `meson test`).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <dcpp/attention/ring_cuda.hpp>
#include <dcpp/comm/mpi.hpp>
#include <dcpp/comm/nccl.hpp>
#include <dcpp/conv/conv1d_cuda.hpp>
#include <dcpp/cuda/memory.hpp>
#include <dcpp/dcpp.hpp>
#include <dcpp/io/guarded_main.hpp>
#include <dcpp/kernels/loss/token_reduce_launch.hpp>
#include <dcpp/loss/token_mean.hpp>
#include <dcpp/route/cuda_route_ops.hpp>
#include <dcpp/route/device_head_parallel.hpp>
#include <dcpp/route/device_router.hpp>
#include <dcpp/route/router.hpp>

#include "trainer/common.hpp"        // model shape, parameters, data, command line, report
#include "trainer/layers_launch.hpp" // the dense layers' kernels

namespace {

using namespace trainer;
using dcpp::detail::cuda_check;
using dcpp::detail::device_array;

//! A device array that grows to the largest size asked for (reused across micro-batches).
template <class T>
T* room(device_array<T>& a, std::size_t n) {
  if (a.size() < n)
    a = device_array<T>(n);
  return a.data();
}

template <class T>
void upload(device_array<T>& a, std::span<const T> host, cudaStream_t stream) {
  room(a, host.size());
  if (!host.empty())
    cuda_check(
        cudaMemcpyAsync(a.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync (upload)");
}

//! The model's parameters (and gradients, momentum) on the device, offsets as in `parameters`.
struct device_model {
  parameters layout; // offsets only
  device_array<float> w, g, v;
  explicit device_model(const parameters& host)
      : w(host.data), g(host.total), v(std::vector<float>(host.total, 0.0f)) {}
  float* weight(std::size_t at) const { return w.data() + at; }
  float* grad(std::size_t at) const { return g.data() + at; }
};

//! Activations and work space of one micro-batch, grown as needed.
struct workspace {
  device_array<std::int32_t> ids, labels, local_cu, begin, embed_keys, cu_padded, cu_real;
  device_array<std::uint8_t> mask, real;
  device_array<std::int64_t> position, length, halo_index, embed_offsets, embed_sources;
  device_array<float> x0, c, x1, q, k, v, o, lse, x2, u, h, x3, logits, loss, dlogits;
  device_array<float> dx3, dh, dx2, dout, dq, dk, dv, dx1, dx0, halo_x, halo_dx, partial, dw, db;
  device_array<float> x3_hp, s_hp, y_hp, y, x4, dx4, dy_hp, dx_hp, dscan, scan_partial;
  device_array<double> sums, totals;
  device_array<std::int64_t> counts;
  //! scratch space of the Thrust algorithms on the compute stream (the embedding index)
  dcpp::device_caching_allocator scratch;
};

// Y[n x m] (+)= X[n x k] W[k x m]
void mm(const float* x, const float* w, float* y, std::int64_t n, int k, int m, bool acc,
        cudaStream_t s) {
  cuda_check(trainer::gemm({x, k, 1, w, m, 1, y, n, m, k, acc}, s), "gemm");
}
// dX[n x k] (+)= dY[n x m] W^T
void mm_dx(const float* dy, const float* w, float* dx, std::int64_t n, int k, int m, bool acc,
           cudaStream_t s) {
  cuda_check(trainer::gemm({dy, m, 1, w, 1, m, dx, n, k, m, acc}, s), "gemm (dx)");
}
// dW[k x m] += X[n x k]^T dY[n x m]
void mm_dw(const float* x, const float* dy, float* dw, std::int64_t n, int k, int m,
           cudaStream_t s) {
  cuda_check(trainer::gemm({x, 1, k, dy, m, 1, dw, k, m, n, true}, s), "gemm (dw)");
}

struct microbatch_result {
  double loss_sum = 0, loss_count = 0;
};

//! The router's twin on the device: Thrust's CUDA policy on the NCCL stream, device arrays.
template <class T>
using device_buffer = device_array<T>;
using device_route_type =
    dcpp::device_router<dcpp::cuda_route_ops, device_buffer, dcpp::nccl_communicator,
                        dcpp::fields::token_ids, dcpp::fields::labels, dcpp::fields::loss_mask>;

//! A micro-batch's payload in device memory.
struct device_payload {
  const std::int32_t* ids;
  const std::int32_t* labels;
  const std::uint8_t* mask;
  const std::uint8_t* real;
};
//! The host router's batch (the calibration path): uploaded into the workspace.
template <class... Fields>
device_payload payload_on_device(const dcpp::thd_batch<Fields...>& batch, workspace& ws,
                                 cudaStream_t stream) {
  upload(ws.ids, std::span(batch.template get<dcpp::fields::token_ids>()), stream);
  upload(ws.labels, std::span(batch.template get<dcpp::fields::labels>()), stream);
  upload(ws.mask, std::span(batch.template get<dcpp::fields::loss_mask>()), stream);
  upload(ws.real, std::span(batch.is_real), stream);
  return {ws.ids.data(), ws.labels.data(), ws.mask.data(), ws.real.data()};
}
//! The device router's batch: already on the device.
template <class Batch>
requires requires(const Batch& b) {
  b.fields;
}
device_payload payload_on_device(const Batch& batch, workspace&, cudaStream_t) {
  return {batch.fields.template get<dcpp::fields::token_ids>().data(),
          batch.fields.template get<dcpp::fields::labels>().data(),
          batch.fields.template get<dcpp::fields::loss_mask>().data(), batch.is_real.data()};
}

//! The head-parallel exchange on the device: Thrust's CUDA policy on the NCCL stream, after the
//! work on `compute` that wrote `in` and before the work enqueued there next, which reads `out`.
template <class T>
void cp2hp(dcpp::nccl_communicator& world, const dcpp::thd_layout& layout, dcpp::head_shape shape,
           const T* in, T* out, cudaStream_t compute, dcpp::detail::stream_order& order) {
  dcpp::cuda_route_ops ops{world.stream()};
  order(compute, world.stream());
  dcpp::cp2hp<device_buffer>(
      ops, world, layout, shape,
      std::span<const T>(in, static_cast<std::size_t>(dcpp::cp_elements(layout, shape))),
      std::span<T>(out, static_cast<std::size_t>(dcpp::hp_elements(layout, shape))));
  order(world.stream(), compute);
}
template <class T>
void hp2cp(dcpp::nccl_communicator& world, const dcpp::thd_layout& layout, dcpp::head_shape shape,
           const T* in, T* out, cudaStream_t compute, dcpp::detail::stream_order& order) {
  dcpp::cuda_route_ops ops{world.stream()};
  order(compute, world.stream());
  dcpp::hp2cp<device_buffer>(
      ops, world, layout, shape,
      std::span<const T>(in, static_cast<std::size_t>(dcpp::hp_elements(layout, shape))),
      std::span<T>(out, static_cast<std::size_t>(dcpp::cp_elements(layout, shape))));
  order(world.stream(), compute);
}

//! Forward and backward of one micro-batch on the device; adds the parameter gradients (for a
//! loss normalised by `scale`) to model.g. Kernels on `stream`; transfers on the group's stream
//! (the world's, `world.stream()`, for the head-parallel exchange). `world` is the
//! communicator the layout's ranks refer to.
template <class Batch>
microbatch_result run_microbatch(dcpp::nccl_communicator& world, dcpp::nccl_communicator group,
                                 const Batch& batch, device_model& model, workspace& ws,
                                 float scale, cudaStream_t stream) {
  const auto& layout = batch.layout;
  const std::int64_t n = batch.tokens();
  const auto N = static_cast<std::size_t>(n);
  const std::size_t nd = N * dim, nh = N * hidden;
  const auto& p = model.layout;
  const device_payload in = payload_on_device(batch, ws, stream);

  // ---- forward ----
  float* x0 = room(ws.x0, nd);
  cuda_check(trainer::embed(model.weight(p.embed), in.ids, x0, n, vocab, dim, stream), "embed");
  // [gpu-conv-halo]
  // conv1d: the halo rows come from their owners over NCCL
  const auto conv_layout = dcpp::conv1d_layout::from_thd(layout, width);
  dcpp::cuda_conv1d_halo<dcpp::nccl_communicator, float> halo(
      group, dcpp::conv1d_halo_plan::make(layout, width), dim, stream);
  float* halo_x = room(ws.halo_x, static_cast<std::size_t>(conv_layout.halo_rows) * dim + 1);
  halo.exchange(x0, halo_x);
  // [gpu-conv-halo]
  upload(ws.begin, std::span<const std::int32_t>(conv_layout.begin), stream);
  upload(ws.position, std::span<const std::int64_t>(conv_layout.position), stream);
  upload(ws.length, std::span<const std::int64_t>(conv_layout.length), stream);
  upload(ws.halo_index, std::span<const std::int64_t>(conv_layout.halo), stream);
  dcpp::kernels::conv1d_params<float> cp;
  cp.x = x0, cp.weight = model.weight(p.conv_w), cp.bias = model.weight(p.conv_b);
  cp.halo_x = halo_x, cp.y = room(ws.c, nd), cp.tokens = n, cp.channels = dim, cp.silu = true;
  cp.seg = {ws.begin.data(), ws.position.data(), ws.length.data(), ws.halo_index.data(),
            conv_layout.segments()};
  cuda_check(dcpp::kernels::conv1d_forward<width, float>(cp, stream), "conv1d_forward");
  float* x1 = room(ws.x1, nd);
  cuda_check(trainer::add(x0, cp.y, x1, static_cast<std::int64_t>(nd), stream), "add");
  // [gpu-attention]
  // attention through the device ring
  const auto part = dcpp::ring_partition::from(layout);
  const dcpp::attention_shape shape{1, 1, dim, 0.0f};
  dcpp::cuda_ring_attention<dcpp::nccl_communicator, float> ring(group, part, shape, stream);
  float *q = room(ws.q, nd), *k = room(ws.k, nd), *v = room(ws.v, nd), *o = room(ws.o, nd);
  float* lse = room(ws.lse, N);
  mm(x1, model.weight(p.wq), q, n, dim, dim, false, stream);
  mm(x1, model.weight(p.wk), k, n, dim, dim, false, stream);
  mm(x1, model.weight(p.wv), v, n, dim, dim, false, stream);
  ring.forward(q, k, v, o, lse);
  // [gpu-attention]
  float* x2 = room(ws.x2, nd);
  cuda_check(cudaMemcpyAsync(x2, x1, nd * sizeof(float), cudaMemcpyDeviceToDevice, stream), "copy");
  mm(o, model.weight(p.wo), x2, n, dim, dim, true, stream); // x2 = x1 + o Wo
  // MLP
  float *u = room(ws.u, nh), *h = room(ws.h, nh), *x3 = room(ws.x3, nd);
  mm(x2, model.weight(p.w1), u, n, dim, hidden, false, stream);
  cuda_check(trainer::relu(u, h, static_cast<std::int64_t>(nh), stream), "relu");
  cuda_check(cudaMemcpyAsync(x3, x2, nd * sizeof(float), cudaMemcpyDeviceToDevice, stream), "copy");
  mm(h, model.weight(p.w2), x3, n, hidden, dim, true, stream); // x3 = x2 + h W2
  // [gpu-head-parallel]
  // the head-parallel layer: cp2hp on the NCCL stream, the recurrence on the compute stream,
  // hp2cp back; x4 = x3 + its output
  dcpp::detail::stream_order order;
  const dcpp::head_shape heads{scan_heads, scan_head_dim};
  const dcpp::head_split split{scan_heads, layout.cp};
  const auto H = static_cast<std::size_t>(dcpp::hp_elements(layout, heads));
  upload(ws.cu_padded, std::span<const std::int32_t>(layout.cu_seqlens_padded), stream);
  upload(ws.cu_real, std::span<const std::int32_t>(layout.cu_seqlens), stream);
  kernels::scan_params sp;
  float* x3_hp = room(ws.x3_hp, H);
  sp.x = x3_hp, sp.s = room(ws.s_hp, H), sp.y = room(ws.y_hp, H);
  sp.gate = model.weight(p.gate), sp.cu_padded = ws.cu_padded.data();
  sp.cu_real = ws.cu_real.data(), sp.sequences = static_cast<int>(layout.samples.size());
  sp.heads_here = split.count(), sp.first_head = split.first(layout.rank_in_group);
  sp.head_dim = scan_head_dim;
  sp.dgate_partial =
      room(ws.scan_partial, std::size_t(sp.sequences) * sp.heads_here * scan_head_dim);
  cp2hp(world, layout, heads, static_cast<const float*>(x3), x3_hp, stream, order);
  cuda_check(trainer::scan_forward(sp, stream), "scan_forward");
  float* y = room(ws.y, nd);
  hp2cp(world, layout, heads, static_cast<const float*>(sp.y), y, stream, order);
  float* x4 = room(ws.x4, nd);
  cuda_check(trainer::add(x3, y, x4, static_cast<std::int64_t>(nd), stream), "add");
  // [gpu-head-parallel]
  // output projection, cross-entropy and the loss-token reduction
  float *logits = room(ws.logits, N * vocab), *loss = room(ws.loss, N),
        *dlogits = room(ws.dlogits, N * vocab);
  mm(x4, model.weight(p.out), logits, n, dim, vocab, false, stream);
  cuda_check(
      trainer::cross_entropy(logits, in.labels, in.mask, scale, loss, dlogits, n, vocab, stream),
      "cross_entropy");
  const int sequences = static_cast<int>(layout.cu_seqlens_padded.size()) - 1;
  std::vector<std::int32_t> local_cu(layout.cu_seqlens_padded.size());
  for (std::size_t s = 0; s < local_cu.size(); ++s)
    local_cu[s] = layout.cu_seqlens_padded[s] / layout.cp;
  upload(ws.local_cu, std::span<const std::int32_t>(local_cu), stream);
  dcpp::kernels::token_reduce_params<float, double> tr{loss,
                                                       n,
                                                       in.mask,
                                                       0,
                                                       ws.local_cu.data(),
                                                       sequences,
                                                       1,
                                                       room(ws.sums, local_cu.size()),
                                                       room(ws.counts, local_cu.size()),
                                                       room(ws.totals, 2)};
  cuda_check(dcpp::kernels::token_reduce(tr, stream), "token_reduce");

  // ---- backward ----
  float *dx4 = room(ws.dx4, nd), *dh = room(ws.dh, nh), *dx2 = room(ws.dx2, nd);
  mm_dw(x4, dlogits, model.grad(p.out), n, dim, vocab, stream);
  mm_dx(dlogits, model.weight(p.out), dx4, n, dim, vocab, false, stream);
  // the head-parallel layer backward: cp2hp of dx4, the reversed recurrence, hp2cp (the first
  // holder's values for a head several ranks hold, which compute it alike; only that holder adds
  // the gate's gradient); dx3 = dx4 + that
  float *dy_hp = room(ws.dy_hp, H), *dx_hp = room(ws.dx_hp, H);
  sp.dy = dy_hp, sp.dx = dx_hp;
  cp2hp(world, layout, heads, static_cast<const float*>(dx4), dy_hp, stream, order);
  cuda_check(trainer::scan_backward(sp, stream), "scan_backward");
  if (split.first_holder(layout.rank_in_group))
    cuda_check(trainer::scan_gate_grad(sp, model.grad(p.gate), stream), "scan_gate_grad");
  float *dscan = room(ws.dscan, nd), *dx3 = room(ws.dx3, nd);
  hp2cp(world, layout, heads, static_cast<const float*>(dx_hp), dscan, stream, order);
  cuda_check(trainer::add(dx4, dscan, dx3, static_cast<std::int64_t>(nd), stream), "add");
  mm_dw(h, dx3, model.grad(p.w2), n, hidden, dim, stream);
  mm_dx(dx3, model.weight(p.w2), dh, n, hidden, dim, false, stream);
  cuda_check(trainer::relu_grad(u, dh, static_cast<std::int64_t>(nh), stream), "relu_grad");
  mm_dw(x2, dh, model.grad(p.w1), n, dim, hidden, stream);
  cuda_check(cudaMemcpyAsync(dx2, dx3, nd * sizeof(float), cudaMemcpyDeviceToDevice, stream),
             "copy");
  mm_dx(dh, model.weight(p.w1), dx2, n, dim, hidden, true, stream); // residual + MLP
  float *dout = room(ws.dout, nd), *dq = room(ws.dq, nd), *dk = room(ws.dk, nd),
        *dv = room(ws.dv, nd);
  mm_dw(o, dx2, model.grad(p.wo), n, dim, dim, stream);
  mm_dx(dx2, model.weight(p.wo), dout, n, dim, dim, false, stream);
  ring.backward(q, k, v, o, lse, dout, dq, dk, dv);
  float* dx1 = room(ws.dx1, nd);
  cuda_check(cudaMemcpyAsync(dx1, dx2, nd * sizeof(float), cudaMemcpyDeviceToDevice, stream),
             "copy");
  mm_dw(x1, dq, model.grad(p.wq), n, dim, dim, stream);
  mm_dw(x1, dk, model.grad(p.wk), n, dim, dim, stream);
  mm_dw(x1, dv, model.grad(p.wv), n, dim, dim, stream);
  mm_dx(dq, model.weight(p.wq), dx1, n, dim, dim, true, stream);
  mm_dx(dk, model.weight(p.wk), dx1, n, dim, dim, true, stream);
  mm_dx(dv, model.weight(p.wv), dx1, n, dim, dim, true, stream);
  // conv backward: the halo rows' gradients go back to their owners over NCCL first
  cp.dy = dx1, cp.dx = room(ws.dx0, nd);
  cp.halo_dx = room(ws.halo_dx, static_cast<std::size_t>(conv_layout.halo_rows) * dim + 1);
  cp.dweight = room(ws.dw, static_cast<std::size_t>(dim) * width), cp.dbias = room(ws.db, dim);
  cp.partial = room(ws.partial,
                    dcpp::kernels::conv1d_backward_workspace_bytes(n, dim, width) / sizeof(float));
  cuda_check(dcpp::kernels::conv1d_halo_gradients<width, float>(cp, stream),
             "conv1d_halo_gradients");
  halo.collect(cp.halo_dx, cp);
  cuda_check(dcpp::kernels::conv1d_backward<width, float>(cp, stream), "conv1d_backward");
  cuda_check(
      trainer::add(model.grad(p.conv_w), cp.dweight, model.grad(p.conv_w), dim * width, stream),
      "add");
  cuda_check(trainer::add(model.grad(p.conv_b), cp.dbias, model.grad(p.conv_b), dim, stream),
             "add");
  // embedding: sum the real tokens' gradients per vocabulary row, in token order
  cuda_check(trainer::add(dx1, cp.dx, dx1, static_cast<std::int64_t>(nd), stream), "add");
  // the index of the real tokens per vocabulary row, built on the device (embedding_csr.hpp)
  cuda_check(trainer::embedding_csr(in.ids, in.real, n, vocab, room(ws.embed_offsets, vocab + 1),
                                    room(ws.embed_sources, std::max<std::size_t>(N, 1)),
                                    room(ws.embed_keys, std::max<std::size_t>(N, 1)), ws.scratch,
                                    stream),
             "embedding_csr");
  cuda_check(dcpp::kernels::row_gather_sum(dx1, ws.embed_offsets.data(), ws.embed_sources.data(),
                                           model.grad(p.embed), vocab, dim, true, stream),
             "row_gather_sum (embedding)");

  double totals[2] = {0, 0};
  cuda_check(
      cudaMemcpyAsync(totals, ws.totals.data(), sizeof(totals), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync (loss totals)");
  // The host vectors uploaded above and the ring/halo objects live until here: wait for the
  // micro-batch before they go.
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return {totals[0], totals[1]};
}

//! The device of this process: the local rank (Open MPI, MPICH or Slurm) modulo the devices.
int pick_device(int world_rank) {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  int local = world_rank;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* value = std::getenv(name); value != nullptr) {
      local = std::atoi(value);
      break;
    }
  return local % count;
}

} // namespace

int main(int argc, char** argv) {
  dcpp::mpi_environment mpi(&argc, &argv);
  auto world = dcpp::mpi_communicator::world();
  CLI::App app{"Train a small model with dynamic context parallelism on CUDA devices (one per MPI "
               "rank, NCCL)"};
  trainer::options o;
  o.add_to(app);
  if (const auto stop = trainer::parse_on_every_rank(app, argc, argv, world, "gpu_trainer"))
    return *stop;
  // Every rank needs a device; ranks agree before any of them touches NCCL.
  const std::uint64_t without = world.all_reduce_max(dcpp::cuda_device_present() ? 0u : 1u);
  if (without != 0) {
    if (world.rank() == 0)
      fmt::print(stderr,
                 "gpu_trainer: no CUDA device on at least one of the {} ranks; it needs "
                 "one GPU per MPI rank. Nothing was run (exit 77: skipped). The same "
                 "loop on CPUs: cpu_trainer.\n",
                 world.size());
    return 77;
  }
  return dcpp::guarded_main(fmt::format("gpu_trainer rank {}: ", world.rank()), [&]() -> int {
    trainer::check_start(world, o);
    cuda_check(cudaSetDevice(pick_device(world.rank())), "cudaSetDevice");
    cudaStream_t compute = nullptr, transfer = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaStreamCreateWithFlags(&transfer, cudaStreamNonBlocking), "cudaStreamCreate");
    auto nccl = dcpp::nccl_communicator::bootstrap(world, transfer);
    dcpp::detail::stream_order order;

    if (!o.calibrate_lengths.empty()) {
      parameters host;
      initialise(host, o.seed);
      device_model model(host);
      workspace ws;
      trainer::calibrate(world, o, "gpu_trainer", [&](auto& router, const shard_type& shard) {
        for (std::size_t mb = 0; mb < router.microbatches(); ++mb) {
          const auto batch = router.dispatch(mb, shard);
          if (batch.layout.idle())
            continue;
          auto group = nccl.group_for(batch.layout.first_rank, batch.layout.cp);
          run_microbatch(nccl, group, batch, model, ws, 1.0f, compute); // ends with a stream sync
        }
      });
      return 0;
    }
    const dcpp::plan_options options = o.plan_options_for(world.size());
    const std::int64_t budget = options.max_tokens_per_rank;
    const std::int64_t longest = dcpp::max_plannable_length(options); // a sample's most tokens
    dcpp::planner<> planner(options);

    parameters host;
    initialise(host, o.seed);
    device_model model(host);
    workspace ws;
    trainer::report report(o, world.size(), budget, world.rank() == 0);
    for (int step = 0; step < o.steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      const shard_type shard =
          make_shard(step, o.samples, o.seed, world.rank(), world.size(), longest);
      const std::vector<double> count_totals{0.0, loss_tokens(shard)};
      const auto counted = dcpp::global_token_mean(world, std::span<const double>(count_totals), 1);
      const auto scale = static_cast<float>(counted.gradient_scale[0]);

      // lengths gathered and the plan made over MPI (metadata); the payloads go to the device
      // once and are routed there, over NCCL on its stream
      auto router = dcpp::plan_step(planner, world, shard);
      device_route_type device_route(dcpp::cuda_route_ops{nccl.stream()}, nccl, router.get_plan(),
                                     router.origins());
      device_route_type::arrays_type payload;
      payload.values =
          std::make_tuple(device_array<std::int32_t>(shard.get<dcpp::fields::token_ids>()),
                          device_array<std::int32_t>(shard.get<dcpp::fields::labels>()),
                          device_array<std::uint8_t>(shard.get<dcpp::fields::loss_mask>()));
      cuda_check(cudaMemsetAsync(model.g.data(), 0, host.total * sizeof(float), compute), "memset");
      double loss_sum = 0, loss_count = 0;
      std::int64_t tokens = 0;
      // [gpu-step]
      for (std::size_t mb = 0; mb < device_route.microbatches(); ++mb) {
        const auto batch = device_route.dispatch(mb, payload); // collective: every rank
        order(transfer, compute); // routed (on the NCCL stream) before it is computed on
        if (batch.layout.idle())
          continue;
        auto group = nccl.group_for(batch.layout.first_rank, batch.layout.cp);
        const auto r = run_microbatch(nccl, group, batch, model, ws, scale, compute);
        loss_sum += r.loss_sum, loss_count += r.loss_count;
        tokens += batch.tokens();
      }
      order(compute, transfer); // every micro-batch's gradients are in before the all-reduce
      nccl.all_reduce(std::span<float>(model.g.data(), host.total), dcpp::reduce_op::sum);
      order(transfer, compute);
      cuda_check(trainer::sgd(model.w.data(), model.g.data(), model.v.data(),
                              static_cast<std::int64_t>(host.total), static_cast<float>(o.lr),
                              static_cast<float>(o.momentum), compute),
                 "sgd");
      cuda_check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
      // [gpu-step]

      const std::vector<double> totals{loss_sum, loss_count};
      const auto mean = dcpp::global_token_mean(world, std::span<const double>(totals), 1);
      trainer::check_step(step, mean, counted, o.lr);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::vector<double> tok{static_cast<double>(tokens)};
      world.all_reduce(std::span<double>(tok), dcpp::reduce_op::sum);
      report.step(step, mean.mean[0], mean.counts[0], tok[0], seconds, router.get_plan());
    }
    cuda_check(cudaMemcpy(host.data.data(), model.w.data(), host.total * sizeof(float),
                          cudaMemcpyDeviceToHost),
               "cudaMemcpy (weights)");
    report.finish(host.data);
    return 0;
  });
}
