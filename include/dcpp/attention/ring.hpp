// THD ring attention over a CP group, forward and backward, on host-memory communicators (local
// threads, MPI): the ring (cp - 1 steps passing K/V to the next rank, double-buffered so that the
// next step's transfer runs while this step computes), the LSE merge, and the backward ring
// (K/V and their dK/dV accumulators travel together, so dK/dV arrive back on their owner).
// The per-step attention is a policy (`attention_policy`): dcpp's kernels through the host
// launcher by default (`host_attention`); a user may put FlashAttention or cuDNN there and keep
// the partition, ring and merge.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/attention/partition.hpp"
#include "dcpp/comm/communicator.hpp"
#include "dcpp/core/math.hpp"
#include "dcpp/error.hpp"
#include "dcpp/simt/host_launcher.hpp"

namespace dcpp {

//! Head layout and softmax scale of an attention call.
struct attention_shape {
  int heads = 0;      //!< query heads
  int kv_heads = 0;   //!< key/value heads (divides heads: GQA/MQA)
  int head_dim = 0;   //!< Q and K head dim: 64, 96, 128, 192 or 256 for dcpp's kernels
  float scale = 0.0f; //!< multiplies QK^T; 0 means 1/sqrt(head_dim)
  int v_head_dim = 0; //!< V (and O) head dim; 0 means head_dim (MLA: head_dim 192, V 128)
  [[nodiscard]] float softmax_scale() const {
    return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  [[nodiscard]] int value_dim() const { return v_head_dim != 0 ? v_head_dim : head_dim; }
};

//! What a policy gets for one ring step. `params` holds the buffers of the pass (host or device
//! pointers, whatever the communicator moves), `params.kind` the part of the causal matrix and
//! `params.layout` the geometry with the KV owner's real rows.
//! Forward: write the partial O (fp32) and LSE of the step's query rows: every row (diagonal,
//! lower) or the second half of each sequence (upper); rows without a visible key get O = 0 and
//! LSE = -inf (a policy promising `fuses_merge` merges them into `params.o` / `params.lse` when
//! `params.merge` is set: see attention_fuses_merge). Backward: add the step's dQ to
//! `params.dq` and dK/dV to `params.dk`/`params.dv` (fp32; `params.dsum` holds rowsum(dO * O),
//! `params.lse_final` the forward's LSE).
template <class T>
struct attention_step {
  int step = 0;     //!< 0 .. cp-1
  int kv_owner = 0; //!< group rank whose K/V the step sees
  const ring_partition* partition = nullptr;
  attention_shape shape;
  kernels::attention_params<T> params;
};

template <class P, class T>
concept attention_policy = requires(P& p, const attention_step<T>& s) {
  p.forward_step(s);
  p.backward_step(s);
};

//! Opt-in promise of a policy (`static constexpr bool fuses_merge = true;`): its forward honours
//! `params.merge`, merging the step's partial O and LSE into `params.o` / `params.lse` (which
//! then hold the running result of the earlier steps) instead of writing them; the ring then
//! runs no merge kernel and keeps no partial buffers. Policies without it get the plain contract.
template <class P>
inline constexpr bool attention_fuses_merge = requires {
  requires std::remove_cvref_t<P>::fuses_merge;
};

namespace detail {

//! The message for a head shape dcpp's kernels do not take.
inline std::string head_shape_message(int head_dim, int v_head_dim) {
  if (head_dim == v_head_dim)
    return fmt::format("ring attention: head_dim = {}; dcpp's kernels take 64, 96, 128, 192 or 256 "
                       "(and 192 with a V head dim of 128)",
                       head_dim);
  return fmt::format("ring attention: head_dim = {} with v_head_dim = {}; dcpp's kernels take "
                     "equal head dims of 64, 96, 128, 192 or 256, or 192 with 128 (MLA)",
                     head_dim, v_head_dim);
}

//! Calls f(integral_constant<DQK>, integral_constant<DV>) for a supported head shape.
template <class F>
decltype(auto) with_head_dims(int head_dim, int v_head_dim, F&& f) {
  using std::integral_constant;
  if (head_dim == v_head_dim) {
    switch (head_dim) {
    case 64: return f(integral_constant<int, 64>{}, integral_constant<int, 64>{});
    case 96: return f(integral_constant<int, 96>{}, integral_constant<int, 96>{});
    case 128: return f(integral_constant<int, 128>{}, integral_constant<int, 128>{});
    case 192: return f(integral_constant<int, 192>{}, integral_constant<int, 192>{});
    case 256: return f(integral_constant<int, 256>{}, integral_constant<int, 256>{});
    default: break;
    }
  } else if (head_dim == 192 && v_head_dim == 128) {
    return f(integral_constant<int, 192>{}, integral_constant<int, 128>{});
  }
  throw error(status_code::invalid_option, head_shape_message(head_dim, v_head_dim));
}
template <class F>
decltype(auto) with_head_dims(const attention_shape& s, F&& f) {
  return with_head_dims(s.head_dim, s.value_dim(), std::forward<F>(f));
}

//! Calls f(integral_constant<D>) for an O / V head dim of dcpp's kernels (merge, row sums).
template <class F>
decltype(auto) with_value_dim(const attention_shape& s, F&& f) {
  return with_head_dims(s, [&](auto, auto dv) { return f(dv); });
}

inline std::uint64_t attention_fingerprint(const ring_partition& part, const attention_shape& s,
                                           int pass) {
  fnv1a h;
  auto mix = [&h](std::int64_t value) { h.mix(value); };
  std::uint32_t scale_bits;
  std::memcpy(&scale_bits, &s.scale, sizeof scale_bits);
  for (const std::int64_t x : {std::int64_t{pass}, std::int64_t{part.cp()}, std::int64_t{s.heads},
                               std::int64_t{s.kv_heads}, std::int64_t{s.head_dim},
                               std::int64_t{s.value_dim()}, std::int64_t{scale_bits}})
    mix(x);
  for (const auto c : part.cu_seqlens())
    mix(c);
  for (const auto c : part.cu_seqlens_padded())
    mix(c);
  return h.value();
}

//! Local checks of a call (sizes, heads, group), agreed by every rank so they fail together.
template <class C>
void check_attention_call(
    C& comm, const ring_partition& part, const attention_shape& s, int pass,
    std::initializer_list<std::pair<const char*, std::pair<std::size_t, std::int64_t>>> buffers,
    std::initializer_list<std::pair<const char*, const void*>> pointers = {}) {
  status local = status::success();
  if (comm.size() != part.cp() || comm.rank() != part.rank())
    local =
        status::failure(status_code::invalid_option,
                        fmt::format("ring attention: the partition is for rank {} of {} but the "
                                    "communicator is rank {} of {}",
                                    part.rank(), part.cp(), comm.rank(), comm.size()));
  else if (s.heads < 1 || s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    local = status::failure(status_code::invalid_option,
                            fmt::format("ring attention: heads = {} must be a positive multiple of "
                                        "kv_heads = {}",
                                        s.heads, s.kv_heads));
  else if (!kernels::attention_head_shape_supported(s.head_dim, s.value_dim()))
    local =
        status::failure(status_code::invalid_option, head_shape_message(s.head_dim, s.value_dim()));
  else if (static_cast<std::int64_t>(s.heads) * std::max(s.head_dim, s.value_dim()) >
           std::numeric_limits<std::int32_t>::max())
    local = status::failure(
        status_code::invalid_option,
        fmt::format("ring attention: heads = {} x head dim {} = {} elements per token is over "
                    "2^31 - 1, the kernels' 32-bit row stride",
                    s.heads, std::max(s.head_dim, s.value_dim()),
                    static_cast<std::int64_t>(s.heads) * std::max(s.head_dim, s.value_dim())));
  else if (!(s.softmax_scale() > 0.0f) || !std::isfinite(s.softmax_scale()))
    local = status::failure(
        status_code::invalid_option,
        fmt::format("ring attention: scale = {} must be finite and positive", s.scale));
  else
    for (const auto& [name, sizes] : buffers)
      if (static_cast<std::int64_t>(sizes.first) != sizes.second) {
        local = status::failure(status_code::invalid_length,
                                fmt::format("ring attention: {} has {} elements, expected {} "
                                            "({} local tokens)",
                                            name, sizes.first, sizes.second, part.tokens()));
        break;
      }
  if (local.ok())
    for (const auto& [name, pointer] : pointers)
      if (reinterpret_cast<std::uintptr_t>(pointer) % 16 != 0) {
        local = status::failure(status_code::invalid_option,
                                fmt::format("ring attention: {} is not 16-byte aligned (address "
                                            "{}); the kernels copy rows with 16-byte cp.async",
                                            name, pointer));
        break;
      }
  throw_unless_agreed(comm, local);
  check_same_everywhere(comm, attention_fingerprint(part, s, pass),
                        "the ring attention call (cu_seqlens, cp, heads, head dims, scale)");
}

template <class Body>
void launch_tiles(const attention_tile_list& tiles, unsigned y, unsigned threads,
                  std::size_t shared, const simt::host_launch_options& options, Body&& body) {
  if (tiles.count() == 0 || y == 0)
    return;
  simt::host_launch({{static_cast<unsigned>(tiles.count()), y}, {threads}, shared}, body, options);
}

template <class Body>
void launch_elements(std::int64_t n, const simt::host_launch_options& options, Body&& body) {
  if (n <= 0)
    return;
  simt::host_launch({{static_cast<unsigned>((n + 255) / 256)}, {256}, 0}, body, options);
}

} // namespace detail

//! dcpp's per-step kernels run on the CPU through the host launcher (the kernels' own source).
//! The step functions are heavy to compile (every kernel body for both head dims); a program can
//! link them precompiled: define `DCPP_HOST_ATTENTION_PRECOMPILED` and link one translation unit
//! that includes kernels/dcpp/kernels/attention/host_attention_instances.cpp (Meson:
//! `dcpp_host_attention_dep`).
struct host_attention {
  static constexpr bool fuses_merge = true; //!< the forward kernel merges in its epilogue
  simt::host_launch_options launch{};

  template <class T>
  void forward_step(const attention_step<T>& s) const;
  template <class T>
  void backward_step(const attention_step<T>& s) const;
};

template <class T>
void host_attention::forward_step(const attention_step<T>& s) const {
  detail::with_head_dims(s.shape, [&](auto dqk, auto dv) {
    constexpr int DQK = decltype(dqk)::value, DV = decltype(dv)::value;
    using cfg = kernels::attention_tile<DQK, DV, T>;
    const auto tiles = s.partition->tiles(cfg::forward_rows, query_rows_of(s.params.kind));
    auto p = s.params;
    p.tiles = tiles.view();
    detail::launch_tiles(
        tiles, static_cast<unsigned>(p.heads), cfg::threads, cfg::forward_shared, launch,
        [&](simt::host_context& ctx) { kernels::attention_forward_body<DQK, DV>(ctx, p); });
  });
}

template <class T>
void host_attention::backward_step(const attention_step<T>& s) const {
  detail::with_head_dims(s.shape, [&](auto dqk, auto dv) {
    constexpr int DQK = decltype(dqk)::value, DV = decltype(dv)::value;
    using cfg = kernels::attention_tile<DQK, DV, T>;
    using part = kernels::attention_dkv_part;
    const auto kind = s.params.kind;
    const auto q_tiles = s.partition->tiles(cfg::backward_rows, query_rows_of(kind));
    const auto k_tiles = s.partition->tiles(cfg::backward_rows, key_rows_of(kind));
    auto p = s.params;
    p.tiles = q_tiles.view();
    detail::launch_tiles(
        q_tiles, static_cast<unsigned>(p.heads), cfg::threads, cfg::dq_shared, launch,
        [&](simt::host_context& ctx) { kernels::attention_dq_body<DQK, DV>(ctx, p); });
    auto pk = s.params;
    pk.tiles = k_tiles.view();
    const auto dkv = [&]<part Part>() {
      detail::launch_tiles(
          k_tiles, static_cast<unsigned>(p.kv_heads), cfg::threads, cfg::dkv_shared, launch,
          [&](simt::host_context& ctx) { kernels::attention_dkv_body<DQK, DV, T, Part>(ctx, pk); });
    };
    if constexpr (cfg::split_dkv) {
      dkv.template operator()<part::dv>();
      dkv.template operator()<part::dk>();
    } else {
      dkv.template operator()<part::both>();
    }
  });
}

#if defined(DCPP_HOST_ATTENTION_PRECOMPILED)
extern template void host_attention::forward_step<float>(const attention_step<float>&) const;
extern template void host_attention::forward_step<half>(const attention_step<half>&) const;
extern template void host_attention::forward_step<bfloat16>(const attention_step<bfloat16>&) const;
extern template void host_attention::backward_step<float>(const attention_step<float>&) const;
extern template void host_attention::backward_step<half>(const attention_step<half>&) const;
extern template void host_attention::backward_step<bfloat16>(const attention_step<bfloat16>&) const;
#endif

static_assert(attention_policy<host_attention, float>);

//! Options of the ring drivers.
struct ring_options {
  simt::host_launch_options launch{}; //!< for dcpp's merge/convert kernels on the host
  int tag = 0x7a00;                   //!< base message tag of the ring's exchanges
};

namespace detail {

//! The step geometry: kind and the KV owner's real rows.
inline kernels::ring_step_kind ring_step_kind_of(int step, int owner, int rank) {
  if (step == 0)
    return kernels::ring_step_kind::diagonal;
  return owner < rank ? kernels::ring_step_kind::lower : kernels::ring_step_kind::upper;
}

} // namespace detail

//! Forward ring attention of one rank of a CP group (`comm` the group's communicator, host
//! memory). q [tokens, heads, D], k/v [tokens, kv_heads, D] in the partition's local layout;
//! writes o (like q) and lse [tokens, heads] (fp32, natural log; -inf on padding rows). Collective
//! over the group; argument errors are agreed so every rank throws the same message.
template <communicator C, class T, class Policy = host_attention>
requires attention_policy<Policy, T>
void ring_attention_forward(C& comm, const ring_partition& part, const attention_shape& shape,
                            std::span<const T> q, std::span<const T> k, std::span<const T> v,
                            std::span<T> o, std::span<float> lse, Policy&& policy = {},
                            const ring_options& options = {}) {
  static_assert(C::buffer_memory == memory_space::host,
                "ring_attention_forward moves host buffers; use a host-memory communicator");
  const std::int64_t n = part.tokens();
  const std::int64_t dqk = shape.head_dim, dv = shape.value_dim();
  const std::int64_t qn = n * shape.heads * dqk, on = n * shape.heads * dv,
                     kn = n * shape.kv_heads * dqk, vn = n * shape.kv_heads * dv;
  detail::check_attention_call(comm, part, shape, 0,
                               {{"q", {q.size(), qn}},
                                {"k", {k.size(), kn}},
                                {"v", {v.size(), vn}},
                                {"o", {o.size(), on}},
                                {"lse", {lse.size(), n * shape.heads}}},
                               {{"q", q.data()}});
  const int cp = part.cp(), rank = part.rank();
  // The K/V that travels: K then V, double-buffered.
  std::vector<T> kv[2];
  kv[0].resize(static_cast<std::size_t>(kn + vn));
  kv[1].resize(kv[0].size());
  std::copy(k.begin(), k.end(), kv[0].begin());
  std::copy(v.begin(), v.end(), kv[0].begin() + kn);
  std::vector<float> o_acc(static_cast<std::size_t>(on)),
      lse_acc(static_cast<std::size_t>(n * shape.heads));
  constexpr bool fused = attention_fuses_merge<Policy>;
  std::vector<float> o_part, lse_part;
  if (cp > 1 && !fused)
    o_part.assign(o_acc.size(), 0.0f), lse_part.assign(lse_acc.size(), 0.0f);

  for (int step = 0, cur = 0; step < cp; ++step, cur ^= 1) {
    const int owner = (rank - step + cp) % cp;
    std::optional<decltype(comm.exchange(std::span<const T>(kv[0]), 0, std::span<T>(kv[1]), 0, 0))>
        transfer;
    if (step + 1 < cp) // the next step's K/V travels while this step computes
      transfer.emplace(comm.exchange(std::span<const T>(kv[cur]), (rank + 1) % cp,
                                     std::span<T>(kv[cur ^ 1]), (rank - 1 + cp) % cp,
                                     options.tag + step));
    const auto kv_real = part.real_of(owner);
    attention_step<T> s;
    s.step = step, s.kv_owner = owner, s.partition = &part, s.shape = shape;
    auto& p = s.params;
    p.q = q.data(), p.k = kv[cur].data(), p.v = kv[cur].data() + kn;
    p.o = step == 0 || fused ? o_acc.data() : o_part.data();
    p.lse = step == 0 || fused ? lse_acc.data() : lse_part.data();
    p.merge = fused && step > 0;
    p.tokens = n, p.heads = shape.heads, p.kv_heads = shape.kv_heads;
    p.scale = shape.softmax_scale();
    p.kind = detail::ring_step_kind_of(step, owner, rank);
    p.layout = {part.offsets().data(), part.own_real().data(), kv_real.data(), part.sequences()};
    policy.forward_step(s);
    if (step > 0 && !fused) {
      const auto rows = part.tiles(64, query_rows_of(p.kind));
      detail::with_value_dim(shape, [&](auto d) {
        constexpr int D = decltype(d)::value;
        const kernels::attention_merge_params<D> mp{o_acc.data(),    lse_acc.data(), o_part.data(),
                                                    lse_part.data(), shape.heads,    rows.view()};
        detail::launch_tiles(
            rows, static_cast<unsigned>(shape.heads), 128, 0, options.launch,
            [&](simt::host_context& ctx) { kernels::attention_merge_body<D>(ctx, mp); });
      });
    }
    if (transfer)
      transfer->wait();
  }
  detail::launch_elements(on, options.launch, [&](simt::host_context& ctx) {
    kernels::attention_convert_body(ctx, o_acc.data(), o.data(), on);
  });
  std::copy(lse_acc.begin(), lse_acc.end(), lse.begin());
}

//! Backward ring attention: from q, k, v, the forward's o and lse, and dO, writes dq, dk, dv
//! (like q, k, v). fp32 accumulation throughout; dK/dV of each K/V block accumulate on the ranks
//! it visits (each transfer overlapping the next step's compute) and arrive back on their owner
//! after the last step.
template <communicator C, class T, class Policy = host_attention>
requires attention_policy<Policy, T>
void ring_attention_backward(C& comm, const ring_partition& part, const attention_shape& shape,
                             std::span<const T> q, std::span<const T> k, std::span<const T> v,
                             std::span<const T> o, std::span<const float> lse,
                             std::span<const T> dout, std::span<T> dq, std::span<T> dk,
                             std::span<T> dv, Policy&& policy = {},
                             const ring_options& options = {}) {
  static_assert(C::buffer_memory == memory_space::host,
                "ring_attention_backward moves host buffers; use a host-memory communicator");
  const std::int64_t n = part.tokens();
  const std::int64_t dqk = shape.head_dim, dvd = shape.value_dim();
  const std::int64_t qn = n * shape.heads * dqk, on = n * shape.heads * dvd,
                     kn = n * shape.kv_heads * dqk, vn = n * shape.kv_heads * dvd;
  detail::check_attention_call(comm, part, shape, 1,
                               {{"q", {q.size(), qn}},
                                {"k", {k.size(), kn}},
                                {"v", {v.size(), vn}},
                                {"o", {o.size(), on}},
                                {"lse", {lse.size(), n * shape.heads}},
                                {"dout", {dout.size(), on}},
                                {"dq", {dq.size(), qn}},
                                {"dk", {dk.size(), kn}},
                                {"dv", {dv.size(), vn}}},
                               {{"q", q.data()}, {"dout", dout.data()}});
  const int cp = part.cp(), rank = part.rank();
  std::vector<float> dsum(static_cast<std::size_t>(n * shape.heads));
  detail::with_value_dim(shape, [&](auto d) {
    constexpr int HD = decltype(d)::value;
    kernels::attention_params<T> p;
    p.out = o.data(), p.dout = dout.data(), p.dsum = dsum.data(), p.tokens = n,
    p.heads = shape.heads;
    detail::launch_elements(n * shape.heads, options.launch, [&](simt::host_context& ctx) {
      kernels::attention_dsum_body<HD>(ctx, p);
    });
  });
  std::vector<T> kv[2];
  kv[0].resize(static_cast<std::size_t>(kn + vn));
  kv[1].resize(kv[0].size());
  std::copy(k.begin(), k.end(), kv[0].begin());
  std::copy(v.begin(), v.end(), kv[0].begin() + kn);
  // dK/dV (fp32, dK then dV) of the K/V block a step sees: the step adds its part into a zeroed
  // buffer, then the block's accumulator from the previous rank (which arrived while the step
  // computed) is added and the sum goes on to the next rank while the following step computes.
  // After the last step the exchange brings every block's full dK/dV home.
  const std::size_t dkv_size = static_cast<std::size_t>(kn + vn);
  std::vector<float> dkv_part[2], dkv_in[2];
  for (int i = 0; i < 2; ++i)
    dkv_part[i].resize(dkv_size), dkv_in[i].resize(cp > 1 ? dkv_size : 0);
  std::vector<float> dq_acc(static_cast<std::size_t>(qn), 0.0f);
  using float_handle = decltype(comm.exchange(std::span<const float>(dkv_part[0]), 0,
                                              std::span<float>(dkv_in[0]), 0, 0));
  std::optional<float_handle> dkv_transfer;

  const int next = (rank + 1) % cp, prev = (rank - 1 + cp) % cp;
  for (int step = 0, cur = 0; step < cp; ++step, cur ^= 1) {
    const int owner = (rank - step + cp) % cp;
    std::optional<decltype(comm.exchange(std::span<const T>(kv[0]), 0, std::span<T>(kv[1]), 0, 0))>
        transfer;
    if (step + 1 < cp)
      transfer.emplace(comm.exchange(std::span<const T>(kv[cur]), next, std::span<T>(kv[cur ^ 1]),
                                     prev, options.tag + 2 * step));
    std::fill(dkv_part[cur].begin(), dkv_part[cur].end(), 0.0f);
    const auto kv_real = part.real_of(owner);
    attention_step<T> s;
    s.step = step, s.kv_owner = owner, s.partition = &part, s.shape = shape;
    auto& p = s.params;
    p.q = q.data(), p.k = kv[cur].data(), p.v = kv[cur].data() + kn;
    p.out = o.data(), p.dout = dout.data(), p.lse_final = lse.data(), p.dsum = dsum.data();
    p.dq = dq_acc.data(), p.dk = dkv_part[cur].data(), p.dv = dkv_part[cur].data() + kn;
    p.tokens = n, p.heads = shape.heads, p.kv_heads = shape.kv_heads;
    p.scale = shape.softmax_scale();
    p.kind = detail::ring_step_kind_of(step, owner, rank);
    p.layout = {part.offsets().data(), part.own_real().data(), kv_real.data(), part.sequences()};
    policy.backward_step(s);
    if (transfer)
      transfer->wait();
    if (dkv_transfer) { // the block's dK/dV from the ranks it visited before
      dkv_transfer->wait();
      detail::launch_elements(kn + vn, options.launch, [&](simt::host_context& ctx) {
        kernels::attention_accumulate_body(ctx, dkv_part[cur].data(), dkv_in[cur].data(), kn + vn);
      });
    }
    if (cp > 1)
      dkv_transfer.emplace(comm.exchange(std::span<const float>(dkv_part[cur]), next,
                                         std::span<float>(dkv_in[cur ^ 1]), prev,
                                         options.tag + 2 * step + 1));
  }
  if (dkv_transfer)
    dkv_transfer->wait();
  const float* dkv = cp > 1 ? dkv_in[cp % 2].data() : dkv_part[0].data();
  detail::launch_elements(qn, options.launch, [&](simt::host_context& ctx) {
    kernels::attention_convert_body(ctx, dq_acc.data(), dq.data(), qn);
  });
  detail::launch_elements(kn, options.launch, [&](simt::host_context& ctx) {
    kernels::attention_convert_body(ctx, dkv, dk.data(), kn);
  });
  detail::launch_elements(vn, options.launch, [&](simt::host_context& ctx) {
    kernels::attention_convert_body(ctx, dkv + kn, dv.data(), vn);
  });
}

} // namespace dcpp
