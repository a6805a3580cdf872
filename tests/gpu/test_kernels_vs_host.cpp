// gpu / kernels vs host launcher: every device kernel path against the same kernel source run on
// the CPU through the host launcher, on the same random inputs. The host launcher is what every
// other test trusts (it is checked against fp64 references); this test carries that trust to the
// device, path by path:
//
//   attention  every step kind (diagonal, lower, upper) x every head shape (64, 96, 128, 192,
//              256, MLA 192/128) x fp16, bf16, fp32 x forward with the merge fused into its
//              epilogue, forward with the separate merge kernel, backward (row sums D, dQ,
//              dK/dV) x geometry: ragged (padding gaps and sequence ends: masked tiles), aligned
//              (whole 64-row tiles: the mask-free loops) and long (4K-token samples: mostly
//              mask-free tiles); the long geometry in bf16 at head dims 128 and MLA only, to
//              keep the host side within minutes
//   conv1d     forward and backward, widths 2-4, fp32, fp16, bf16
//   loss       the token reduction, fp32 losses with fp64 and fp32 accumulators
//   element    the ring's fp32 -> T conversion and dK/dV accumulation, the partition gather
//
// Tolerances (relative to the largest host value of each output): the data-movement kernels and
// integer counts bit for bit; 2e-5 where the device sums in another order (the tensor cores'
// internal order, block reductions) or uses its fast exp2/log (ex2.approx, lg2.approx): both
// paths round P and dS to the input type at the same points, so what differs is summation order
// and a few ulps of the exponentials.
//
// Usage: kernels_vs_host [--list] [--check-coverage] [--small] [--filter TEXT]. --list prints the
// cases; --check-coverage checks (without a device) that the cases enumerate every path above;
// --small keeps the ragged geometry in bf16 and fp32 at head dim 64 (compute-sanitizer runs). Exits
// 77 without a device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "dcpp/attention/ring.hpp"
#include "dcpp/attention/ring_cuda.hpp"
#include "dcpp/conv/conv1d.hpp"
#include "dcpp/cuda/memory.hpp"
#include "dcpp/kernels/conv/causal_conv1d_launch.hpp"
#include "dcpp/kernels/loss/token_reduce_launch.hpp"
#include "dcpp/loss/token_mean.hpp"

namespace {

using dcpp::detail::device_array;
using dcpp::kernels::ring_step_kind;

enum class geometry { ragged, aligned, long4k };
enum class pass { forward_fused, forward_separate, backward };
enum class dtype { f16, bf16, f32 };

struct attention_case {
  dtype type;
  int dqk, dv;
  ring_step_kind kind;
  geometry geo;
  pass p;
};

const char* name_of(dtype t) {
  return t == dtype::f16 ? "fp16" : t == dtype::bf16 ? "bf16" : "fp32";
}
const char* name_of(ring_step_kind k) {
  return k == ring_step_kind::diagonal ? "diagonal"
         : k == ring_step_kind::lower  ? "lower"
                                       : "upper";
}
const char* name_of(geometry g) {
  return g == geometry::ragged ? "ragged" : g == geometry::aligned ? "aligned" : "long";
}
const char* name_of(pass p) {
  return p == pass::forward_fused      ? "forward fused merge"
         : p == pass::forward_separate ? "forward separate merge"
                                       : "backward";
}
std::string name_of(const attention_case& c) {
  return fmt::format("attention {} {}/{} {} {} {}", name_of(c.type), c.dqk, c.dv, name_of(c.kind),
                     name_of(c.geo), name_of(c.p));
}

constexpr std::pair<int, int> head_shapes[] = {{64, 64},   {96, 96},   {128, 128},
                                               {192, 192}, {256, 256}, {192, 128}};
constexpr dtype dtypes[] = {dtype::f16, dtype::bf16, dtype::f32};
constexpr ring_step_kind kinds[] = {ring_step_kind::diagonal, ring_step_kind::lower,
                                    ring_step_kind::upper};
constexpr pass passes[] = {pass::forward_fused, pass::forward_separate, pass::backward};

std::vector<attention_case> attention_cases(bool small) {
  std::vector<attention_case> out;
  for (const dtype t : dtypes)
    for (const auto& [dqk, dv] : head_shapes)
      for (const ring_step_kind k : kinds)
        for (const pass p : passes)
          for (const geometry g : {geometry::ragged, geometry::aligned, geometry::long4k}) {
            // the long geometry: bf16 at head dims 128 and MLA (the host side's minutes)
            const bool long_shape = dv == 128 && (dqk == 128 || dqk == 192);
            if (g == geometry::long4k && (small || t != dtype::bf16 || !long_shape))
              continue;
            // the sanitizers' cases: ragged tiles in bf16, and fp32's FMA path at head dim 64
            if (small && (g != geometry::ragged ||
                          !(t == dtype::bf16 || (t == dtype::f32 && dqk == 64 && dv == 64))))
              continue;
            out.push_back({t, dqk, dv, k, g, p});
          }
  return out;
}

//! Every (type, head shape, kind, pass) in every small geometry, and the long geometry at least
//! once per (kind, pass): what the file's comment promises.
bool check_coverage() {
  const auto cases = attention_cases(false);
  std::set<std::tuple<dtype, int, int, ring_step_kind, pass, geometry>> have;
  for (const auto& c : cases)
    have.emplace(c.type, c.dqk, c.dv, c.kind, c.p, c.geo);
  bool ok = true;
  for (const ring_step_kind k : kinds)
    for (const pass p : passes) {
      bool long_seen = false;
      for (const dtype t : dtypes)
        for (const auto& [dqk, dv] : head_shapes) {
          for (const geometry g : {geometry::ragged, geometry::aligned})
            if (!have.count({t, dqk, dv, k, p, g})) {
              std::printf("missing: %s\n", name_of(attention_case{t, dqk, dv, k, g, p}).c_str());
              ok = false;
            }
          long_seen |= have.count({t, dqk, dv, k, p, geometry::long4k}) > 0;
        }
      if (!long_seen) {
        std::printf("missing: a long geometry for %s %s\n", name_of(k), name_of(p));
        ok = false;
      }
    }
  std::printf("%zu attention cases%s\n", cases.size(), ok ? ", every path enumerated" : "");
  return ok;
}

//! The largest difference relative to the largest host value (0 when both are all zero).
template <class A, class B>
double relative_error(const std::vector<A>& host, const std::vector<B>& device) {
  double top = 0, worst = 0;
  for (const A& x : host)
    top = std::max(top, std::abs(static_cast<double>(dcpp::to_float(x))));
  for (std::size_t i = 0; i < host.size(); ++i) {
    const double a = dcpp::to_float(host[i]), b = dcpp::to_float(device[i]);
    const double d = std::isfinite(a) && std::isfinite(b) ? std::abs(a - b)
                     : (std::isinf(a) && a == b) || (std::isnan(a) && std::isnan(b))
                         ? 0.0
                         : std::numeric_limits<double>::infinity();
    worst = std::max(worst, d);
  }
  return top > 0 ? worst / top : worst;
}

template <class T>
std::vector<T> download(const device_array<T>& d) {
  std::vector<T> out(d.size());
  if (!out.empty())
    dcpp::detail::cuda_check(
        cudaMemcpy(out.data(), d.data(), d.size() * sizeof(T), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  return out;
}

template <class T>
std::vector<T> random_values(std::mt19937_64& rng, std::size_t n, float amplitude) {
  std::uniform_real_distribution<float> u(-amplitude, amplitude);
  std::vector<T> v(n);
  for (auto& x : v)
    x = dcpp::from_float<T>(u(rng));
  return v;
}

std::vector<int> lengths_of(geometry g) {
  switch (g) {
  case geometry::ragged: return {1, 17, 65, 130, 3, 700};
  case geometry::aligned: return {512, 256, 1024};
  case geometry::long4k: return {4096, 4096};
  }
  return {};
}

int failures = 0;

void report(const std::string& what, double error, double limit) {
  const bool ok = error <= limit;
  failures += ok ? 0 : 1;
  std::printf("%-62s %s (error %.3g, limit %.3g)\n", what.c_str(), ok ? "ok" : "FAILED", error,
              limit);
}

//! One attention case: the same step on the host launcher and on the device.
template <class T>
void run_attention(const attention_case& c, std::uint64_t seed) {
  const int cp = 2;
  const int rank = c.kind == ring_step_kind::lower ? 1 : 0;
  const int owner = c.kind == ring_step_kind::diagonal ? rank : 1 - rank;
  std::vector<std::int32_t> cu{0};
  for (const int l : lengths_of(c.geo))
    cu.push_back(cu.back() + l);
  const auto part = dcpp::ring_partition::padded(cu, cp, rank);
  const dcpp::attention_shape shape{4, 2, c.dqk, 0.0f, c.dv == c.dqk ? 0 : c.dv};
  const std::int64_t n = part.tokens();
  const auto H = static_cast<std::size_t>(shape.heads),
             Hk = static_cast<std::size_t>(shape.kv_heads);
  const auto rows = static_cast<std::size_t>(n);
  const std::size_t qn = rows * H * c.dqk, kn = rows * Hk * c.dqk, vn = rows * Hk * c.dv,
                    on = rows * H * c.dv, ln = rows * H;
  std::mt19937_64 rng(seed);
  const auto q = random_values<T>(rng, qn, 2.0f), k = random_values<T>(rng, kn, 2.0f);
  const auto v = random_values<T>(rng, vn, 1.0f);
  const auto kv_real = part.real_of(owner);
  dcpp::attention_step<T> s;
  s.step = owner == rank ? 0 : 1, s.kv_owner = owner, s.partition = &part, s.shape = shape;
  auto& p = s.params;
  p.tokens = n, p.heads = shape.heads, p.kv_heads = shape.kv_heads, p.scale = shape.softmax_scale();
  p.kind = c.kind;
  const auto host_layout = dcpp::kernels::attention_layout{
      part.offsets().data(), part.own_real().data(), kv_real.data(), part.sequences()};
  // device copies
  cudaStream_t stream = nullptr;
  dcpp::detail::cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");
  const device_array<T> dq_in(q), dk_in(k), dv_in(v);
  const device_array<std::int32_t> d_offsets(part.offsets()), d_own(part.own_real()), d_kv(kv_real);
  const dcpp::kernels::attention_layout device_layout{d_offsets.data(), d_own.data(), d_kv.data(),
                                                      part.sequences()};
  dcpp::cuda_attention<T> device_kernels(part, stream);
  const dcpp::host_attention host_kernels;
  const std::string name = name_of(c);

  if (c.p != pass::backward) {
    const bool fused = c.p == pass::forward_fused;
    // a running result of earlier steps, merged into by the fused forward or the merge kernel
    std::vector<float> o0(on), lse0(ln);
    for (auto& x : o0)
      x = std::uniform_real_distribution<float>(-1, 1)(rng);
    for (auto& x : lse0)
      x = std::uniform_real_distribution<float>(-2, 6)(rng);
    std::vector<float> ho = o0, hl = lse0, ho_part(on, 0.0f), hl_part(ln, 0.0f);
    device_array<float> d_o(o0), d_l(lse0), d_o_part(on), d_l_part(ln);
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.layout = host_layout;
    p.o = fused ? ho.data() : ho_part.data(), p.lse = fused ? hl.data() : hl_part.data();
    p.merge = fused;
    host_kernels.forward_step(s);
    auto ds = s;
    ds.params.q = dq_in.data(), ds.params.k = dk_in.data(), ds.params.v = dv_in.data();
    ds.params.layout = device_layout;
    ds.params.o = fused ? d_o.data() : d_o_part.data();
    ds.params.lse = fused ? d_l.data() : d_l_part.data();
    device_kernels.forward_step(ds);
    if (!fused) {
      const auto q_rows = part.tiles(64, dcpp::query_rows_of(c.kind));
      const dcpp::detail::device_tiles d_rows(q_rows);
      dcpp::detail::with_value_dim(shape, [&](auto d) {
        constexpr int D = decltype(d)::value;
        const dcpp::kernels::attention_merge_params<D> hm{
            ho.data(), hl.data(), ho_part.data(), hl_part.data(), shape.heads, q_rows.view()};
        dcpp::detail::launch_tiles(q_rows, static_cast<unsigned>(shape.heads), 128, 0, {},
                                   [&](dcpp::simt::host_context& ctx) {
                                     dcpp::kernels::attention_merge_body<D>(ctx, hm);
                                   });
        const dcpp::kernels::attention_merge_params<D> dm{
            d_o.data(), d_l.data(), d_o_part.data(), d_l_part.data(), shape.heads, d_rows.view()};
        dcpp::detail::cuda_check(dcpp::kernels::attention_merge<D>(dm, stream), "attention_merge");
      });
    }
    dcpp::detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    report(name + ": O", relative_error(ho, download(d_o)), 2e-5);
    report(name + ": LSE", relative_error(hl, download(d_l)), 2e-5);
    if (!fused) {
      report(name + ": partial O", relative_error(ho_part, download(d_o_part)), 2e-5);
      report(name + ": partial LSE", relative_error(hl_part, download(d_l_part)), 2e-5);
    }
  } else {
    // the final O and LSE a backward reads: the host's own forward of this step
    std::vector<float> of(on, 0.0f), lf(ln, 0.0f);
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.layout = host_layout;
    p.o = of.data(), p.lse = lf.data(), p.merge = false;
    host_kernels.forward_step(s);
    std::vector<T> out(on);
    for (std::size_t i = 0; i < on; ++i)
      out[i] = dcpp::from_float<T>(of[i]);
    const auto dout = random_values<T>(rng, on, 1.0f);
    std::vector<float> hdsum(ln, 0.0f);
    dcpp::kernels::attention_params<T> pre;
    pre.out = out.data(), pre.dout = dout.data(), pre.dsum = hdsum.data(), pre.tokens = n,
    pre.heads = shape.heads;
    dcpp::detail::with_value_dim(shape, [&](auto d) {
      dcpp::detail::launch_elements(n * shape.heads, {}, [&](dcpp::simt::host_context& ctx) {
        dcpp::kernels::attention_dsum_body<decltype(d)::value>(ctx, pre);
      });
    });
    const device_array<T> d_out(out), d_dout(dout);
    device_array<float> d_dsum(ln), d_lf(lf);
    auto dpre = pre;
    dpre.out = d_out.data(), dpre.dout = d_dout.data(), dpre.dsum = d_dsum.data();
    dcpp::detail::cuda_check(
        dcpp::detail::with_value_dim(shape,
                                     [&](auto d) {
                                       return dcpp::kernels::attention_dsum<decltype(d)::value, T>(
                                           dpre, stream);
                                     }),
        "attention_dsum");
    // accumulators holding earlier steps' parts
    std::vector<float> hq(qn), hk(kn), hv(vn);
    for (auto* acc : {&hq, &hk, &hv})
      for (auto& x : *acc)
        x = std::uniform_real_distribution<float>(-1, 1)(rng);
    device_array<float> d_q(hq), d_k(hk), d_v(hv);
    p.out = out.data(), p.dout = dout.data(), p.lse_final = lf.data(), p.dsum = hdsum.data();
    p.dq = hq.data(), p.dk = hk.data(), p.dv = hv.data();
    host_kernels.backward_step(s);
    auto ds = s;
    ds.params.q = dq_in.data(), ds.params.k = dk_in.data(), ds.params.v = dv_in.data();
    ds.params.layout = device_layout;
    ds.params.out = d_out.data(), ds.params.dout = d_dout.data(), ds.params.lse_final = d_lf.data();
    ds.params.dsum = d_dsum.data();
    ds.params.dq = d_q.data(), ds.params.dk = d_k.data(), ds.params.dv = d_v.data();
    device_kernels.backward_step(ds);
    dcpp::detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    report(name + ": D", relative_error(hdsum, download(d_dsum)), 2e-5);
    report(name + ": dQ", relative_error(hq, download(d_q)), 2e-5);
    report(name + ": dK", relative_error(hk, download(d_k)), 2e-5);
    report(name + ": dV", relative_error(hv, download(d_v)), 2e-5);
  }
  cudaStreamDestroy(stream);
}

template <int W, class T>
void run_conv1d(const char* type_name, std::uint64_t seed) {
  const std::vector<std::int32_t> cu{0, 1, 40, 300, 301, 1000};
  const std::int64_t tokens = 1024; // the rows past the last sample form a padding segment
  const int channels = 136;         // not a multiple of every vector width: both paths run
  const auto layout = dcpp::pad_layout(dcpp::conv1d_layout::from_cu_seqlens(cu, cu.back()), tokens);
  const auto n = static_cast<std::size_t>(tokens * channels);
  std::mt19937_64 rng(seed);
  const auto x = random_values<T>(rng, n, 1.0f), dy = random_values<T>(rng, n, 1.0f);
  const auto w = random_values<T>(rng, static_cast<std::size_t>(channels * W), 0.5f);
  const auto b = random_values<T>(rng, static_cast<std::size_t>(channels), 0.5f);
  std::vector<T> y(n), dx(n);
  std::vector<float> dw(static_cast<std::size_t>(channels * W)),
      db(static_cast<std::size_t>(channels));
  dcpp::kernels::conv1d_params<T> p;
  p.x = x.data(), p.weight = w.data(), p.bias = b.data(), p.y = y.data(), p.dy = dy.data();
  p.dx = dx.data(), p.dweight = dw.data(), p.dbias = db.data(), p.tokens = tokens;
  p.channels = channels, p.silu = true;
  dcpp::conv1d_forward_on_host<W, T>(p, layout);
  dcpp::conv1d_backward_on_host<W, T>(p, layout);
  const device_array<T> d_x(x), d_dy(dy), d_w(w), d_b(b);
  device_array<T> d_y(n), d_dx(n);
  device_array<float> d_dw(dw.size()), d_db(db.size());
  device_array<std::byte> partial(
      dcpp::kernels::conv1d_backward_workspace_bytes(tokens, channels, W));
  const device_array<std::int32_t> d_begin(layout.begin);
  const device_array<std::int64_t> d_pos(layout.position), d_len(layout.length),
      d_halo(layout.halo);
  auto dp = p;
  dp.x = d_x.data(), dp.weight = d_w.data(), dp.bias = d_b.data(), dp.y = d_y.data();
  dp.dy = d_dy.data(), dp.dx = d_dx.data(), dp.dweight = d_dw.data(), dp.dbias = d_db.data();
  dp.partial = reinterpret_cast<float*>(partial.data());
  dp.seg = {d_begin.data(), d_pos.data(), d_len.data(), d_halo.data(), layout.segments()};
  dcpp::detail::cuda_check(dcpp::kernels::conv1d_forward<W, T>(dp, nullptr), "conv1d_forward");
  dcpp::detail::cuda_check(dcpp::kernels::conv1d_backward<W, T>(dp, nullptr), "conv1d_backward");
  dcpp::detail::cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const std::string name = fmt::format("conv1d {} W={}", type_name, W);
  report(name + ": y", relative_error(y, download(d_y)), 2e-5);
  report(name + ": dx", relative_error(dx, download(d_dx)), 2e-5);
  report(name + ": dw", relative_error(dw, download(d_dw)), 2e-5);
  report(name + ": db", relative_error(db, download(d_db)), 2e-5);
}

template <class Acc>
void run_loss(const char* acc_name, std::uint64_t seed) {
  const std::vector<std::int32_t> cu{0, 1, 300, 301, 5000, 5003};
  const int heads = 2;
  const std::int64_t tokens = cu.back();
  std::mt19937_64 rng(seed);
  const auto losses = random_values<float>(rng, static_cast<std::size_t>(tokens * heads), 4.0f);
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(tokens * heads));
  for (auto& m : mask)
    m = static_cast<std::uint8_t>(rng() % 3 != 0);
  const int sequences = static_cast<int>(cu.size()) - 1;
  std::vector<Acc> sums(static_cast<std::size_t>(sequences * heads)), totals(2 * heads);
  std::vector<std::int64_t> counts(sums.size());
  dcpp::kernels::token_reduce_params<float, Acc> p;
  p.losses = losses.data(), p.loss_head_stride = tokens, p.mask = mask.data();
  p.mask_head_stride = tokens, p.cu_seqlens = cu.data(), p.sequences = sequences, p.heads = heads;
  p.sums = sums.data(), p.counts = counts.data(), p.totals = totals.data();
  dcpp::token_reduce_on_host(p, tokens);
  const device_array<float> d_losses(losses);
  const device_array<std::uint8_t> d_mask(mask);
  const device_array<std::int32_t> d_cu(cu);
  device_array<Acc> d_sums(sums.size()), d_totals(totals.size());
  device_array<std::int64_t> d_counts(counts.size());
  auto dp = p;
  dp.losses = d_losses.data(), dp.mask = d_mask.data(), dp.cu_seqlens = d_cu.data();
  dp.sums = d_sums.data(), dp.counts = d_counts.data(), dp.totals = d_totals.data();
  dcpp::detail::cuda_check(dcpp::kernels::token_reduce<float, Acc>(dp, nullptr), "token_reduce");
  dcpp::detail::cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const std::string name = fmt::format("loss reduction fp32 -> {}", acc_name);
  report(name + ": sums", relative_error(sums, download(d_sums)), 2e-5);
  report(name + ": counts (bit for bit)", counts == download(d_counts) ? 0.0 : 1.0, 0.0);
  report(name + ": totals", relative_error(totals, download(d_totals)), 2e-5);
}

template <class T>
void run_elementwise(const char* type_name, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t n = 100003;
  const auto in = random_values<float>(rng, static_cast<std::size_t>(n), 3.0f);
  std::vector<T> out(static_cast<std::size_t>(n));
  dcpp::detail::launch_elements(n, {}, [&](dcpp::simt::host_context& ctx) {
    dcpp::kernels::attention_convert_body(ctx, in.data(), out.data(), n);
  });
  const device_array<float> d_in(in);
  device_array<T> d_out(static_cast<std::size_t>(n));
  dcpp::detail::cuda_check(
      dcpp::kernels::attention_convert<T>(d_in.data(), d_out.data(), n, nullptr),
      "attention_convert");
  auto acc = random_values<float>(rng, static_cast<std::size_t>(n), 1.0f);
  device_array<float> d_acc(acc);
  dcpp::detail::launch_elements(n, {}, [&](dcpp::simt::host_context& ctx) {
    dcpp::kernels::attention_accumulate_body(ctx, acc.data(), in.data(), n);
  });
  dcpp::detail::cuda_check(
      dcpp::kernels::attention_accumulate(d_acc.data(), d_in.data(), n, nullptr),
      "attention_accumulate");
  dcpp::detail::cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const auto got = download(d_out);
  report(fmt::format("element fp32 -> {} conversion (bit for bit)", type_name),
         std::memcmp(got.data(), out.data(), out.size() * sizeof(T)) == 0 ? 0.0 : 1.0, 0.0);
  report("element dK/dV accumulation (bit for bit)", download(d_acc) == acc ? 0.0 : 1.0, 0.0);
}

template <class F>
void dispatch(dtype t, F&& f) {
  switch (t) {
  case dtype::f16: f.template operator()<dcpp::half>(); break;
  case dtype::bf16: f.template operator()<dcpp::bfloat16>(); break;
  case dtype::f32: f.template operator()<float>(); break;
  }
}

} // namespace

int main(int argc, char** argv) {
  bool list = false, coverage = false, small = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--list")
      list = true;
    else if (a == "--check-coverage")
      coverage = true;
    else if (a == "--small")
      small = true;
    else if (a == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--list] [--check-coverage] [--small] [--filter TEXT]\n",
                   argv[0]);
      return 2;
    }
  }
  if (coverage)
    return check_coverage() ? 0 : 1;
  const auto cases = attention_cases(small);
  if (list) {
    for (const auto& c : cases)
      std::puts(name_of(c).c_str());
    return 0;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device: skipping the kernels-vs-host-launcher comparison");
    return 77;
  }
  std::uint64_t seed = 1;
  for (const auto& c : cases) {
    if (!filter.empty() && name_of(c).find(filter) == std::string::npos)
      continue;
    dispatch(c.type, [&]<class T>() { run_attention<T>(c, ++seed); });
  }
  if (filter.empty() || std::string("conv1d").find(filter) != std::string::npos) {
    run_conv1d<2, float>("fp32", 11);
    run_conv1d<3, dcpp::half>("fp16", 12);
    run_conv1d<4, dcpp::bfloat16>("bf16", 13);
    run_conv1d<4, float>("fp32", 14);
  }
  if (filter.empty() || std::string("loss reduction").find(filter) != std::string::npos) {
    run_loss<double>("fp64", 21);
    run_loss<float>("fp32", 22);
  }
  if (filter.empty() || std::string("element").find(filter) != std::string::npos) {
    run_elementwise<dcpp::half>("fp16", 31);
    run_elementwise<dcpp::bfloat16>("bf16", 32);
    run_elementwise<float>("fp32", 33);
  }
  std::printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
