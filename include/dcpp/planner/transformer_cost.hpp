// A transformer cost model: linear layers, causal attention and the ring's exposed communication.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "dcpp/core/math.hpp"
#include "dcpp/error.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/network.hpp"

namespace dcpp {

//! The shape of a dense decoder-only transformer.
struct model_shape {
  std::string_view name;
  std::int32_t layers = 32;
  std::int32_t hidden = 4096;
  std::int32_t heads = 32;
  std::int32_t kv_heads = 8;
  std::int32_t ffn = 14336;
  std::int32_t vocab = 128256;
  bool gated_mlp = true;     //!< SwiGLU: three ffn matrices instead of two
  std::int32_t head_dim = 0; //!< per attention head; 0: hidden / heads
  //! Query (and output projection) width: heads x head_dim.
  [[nodiscard]] constexpr double query_width() const noexcept {
    return head_dim == 0 ? static_cast<double>(hidden)
                         : static_cast<double>(heads) * static_cast<double>(head_dim);
  }
  //! Key (and value) width: kv_heads x head_dim.
  [[nodiscard]] constexpr double kv_width() const noexcept {
    return kv_heads *
           (head_dim == 0 ? static_cast<double>(hidden) / heads : static_cast<double>(head_dim));
  }
  //! The first field out of its range, with the value and the limit; success when none is.
  [[nodiscard]] status check() const {
    for (const auto& [field, value] : {std::pair<const char*, std::int32_t>{"layers", layers},
                                       {"hidden", hidden},
                                       {"heads", heads},
                                       {"kv_heads", kv_heads},
                                       {"ffn", ffn},
                                       {"vocab", vocab}})
      if (value < 1)
        return status::failure(status_code::invalid_option,
                               fmt::format("model {} = {} must be >= 1", field, value));
    if (head_dim < 0)
      return status::failure(
          status_code::invalid_option,
          fmt::format("model head_dim = {} must be >= 0 (0: hidden / heads)", head_dim));
    if (kv_heads > heads)
      return status::failure(
          status_code::invalid_option,
          fmt::format("model kv_heads = {} exceeds heads = {}", kv_heads, heads));
    return status::success();
  }
  friend bool operator==(const model_shape&, const model_shape&) = default;
};

//! What one device and its network achieve. Rates are sustained, not peak.
struct device_spec {
  std::string_view name;
  double matmul_flops = 5.9e14;    //!< dense bf16 GEMM FLOP/s reached by the linear layers
  double attention_flops = 4.5e14; //!< FLOP/s reached by the attention kernel
  network_spec network{};          //!< GPUs per node; ring links inside and between nodes
  std::int32_t bytes_per_element = 2;
  double microbatch_overhead = 5e-3; //!< seconds per micro-batch: launches, mesh collectives
  friend bool operator==(const device_spec&, const device_spec&) = default;
};

//! Public model shapes (from the models' published configurations).
inline constexpr std::array<model_shape, 3> model_presets{{
    {"llama3-8b", 32, 4096, 32, 8, 14336, 128256, true},
    {"llama3-70b", 80, 8192, 64, 8, 28672, 128256, true},
    {"qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, true},
}};

//! Devices, in nodes of 8 GPUs (DGX/HGX H100 and A100 systems):
//! * compute: peak bf16 dense rate (H100 SXM 989 TFLOP/s, A100 312 TFLOP/s: NVIDIA's datasheets)
//!   x an achievable fraction (0.6 for GEMMs, 0.45 for attention, typical of large-batch
//!   training reports);
//! * inside a node: a third of NVLink's per-direction peak (H100 NVLink 4: 900 GB/s both ways,
//!   450 one way; A100 NVLink 3: 600 GB/s, 300 one way), because p2p send/recv through NCCL
//!   shares the links with the other collectives of the step (tensor and data parallel);
//! * between nodes: one NIC per GPU (DGX H100: ConnectX-7 400 Gb/s NDR, 50 GB/s; DGX A100:
//!   ConnectX-6 200 Gb/s HDR, 25 GB/s) at 80% of line rate, what NCCL's p2p over InfiniBand
//!   sustains; a larger per-message latency (the proxy thread and RDMA round trip);
//! * 5 ms per micro-batch for launches and the dynamic mesh's per-micro-batch collectives (an
//!   assumption to calibrate: it is what makes an extra micro-batch cost something).
inline constexpr std::array<device_spec, 2> device_presets{{
    {"h100", 0.6 * 989e12, 0.45 * 989e12, {8, {450e9 / 3, 1.5e-5}, {0.8 * 50e9, 2.5e-5}}, 2, 5e-3},
    {"a100", 0.6 * 312e12, 0.45 * 312e12, {8, {300e9 / 3, 2.0e-5}, {0.8 * 25e9, 3.0e-5}}, 2, 5e-3},
}};

//! Time per rank of one sample, forward and backward, on a CP group of `cp` ranks (seconds):
//!   linear:    3 x (2 x parameters per token) x tokens on the rank / matmul rate
//!   attention: 3.5 x (2 x L^2 x hidden per layer, causal) / cp / attention rate
//!   ring:      (cp-1) steps per layer, forward (K,V) and backward (K,V,dK,dV); only the part of
//!              each step's transfer that the step's attention compute cannot hide is exposed;
//!              a step's transfer runs at the tier the ring crosses (`network_spec::tier`: a
//!              group inside a node at the NVLink rate, one spanning nodes at the inter-node
//!              rate, since each step waits for its slowest hop).
//! Only + - * / and max: the same bits on every platform, which plan determinism needs.
class transformer_cost {
public:
  transformer_cost() : transformer_cost(model_presets[0], device_presets[0]) {}
  transformer_cost(const model_shape& model, const device_spec& device)
      : model_(model), device_(device) {
    const double h = model.hidden;
    const double q = model.query_width();
    const double kv = model.kv_width();
    const double mlp = (model.gated_mlp ? 3.0 : 2.0) * h * model.ffn;
    const double per_layer = h * (q + 2.0 * kv) + q * h + mlp;
    linear_flops_per_token_ = 3.0 * 2.0 * (per_layer * model.layers + h * model.vocab);
    attention_flops_per_token2_ = 2.0 * q * model.layers; // forward, causal, per L^2
    kv_bytes_per_token_ = 2.0 * kv * device.bytes_per_element;
  }

  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const noexcept {
    const double l = static_cast<double>(length);
    const double c = static_cast<double>(cp);
    // x / c, as a multiplication by 2^-k when cp = 2^k: the same bits (scaling by a power of two
    // is exact), a third of the divisions of a planner's cost table
    const bool power_of_two = is_power_of_two(cp);
    const double inverse = power_of_two ? inverse_of_power_of_two(cp) : 1.0;
    const auto per_rank = [&](double x) { return power_of_two ? x * inverse : x / c; };
    const double tokens = per_rank(l);
    const double linear = linear_flops_per_token_ * tokens / device_.matmul_flops;
    const double attention_forward =
        per_rank(attention_flops_per_token2_ * l * l) / device_.attention_flops;
    const double attention = 3.5 * attention_forward;
    if (cp <= 1)
      return linear + attention;
    // one ring step of one layer: compute of 1/cp of the rank's attention, transfer of one KV block
    const double step_compute = per_rank(attention_forward) / model_.layers;
    const double step_bytes = kv_bytes_per_token_ * tokens;
    const link_tier& link = device_.network.tier(cp);
    const double forward_step = link.latency + step_bytes / link.bytes_per_second;
    const double backward_step = link.latency + 2.0 * step_bytes / link.bytes_per_second;
    const double exposed = std::max(0.0, forward_step - step_compute) +
                           std::max(0.0, backward_step - 2.5 * step_compute);
    return linear + attention + (c - 1.0) * model_.layers * exposed;
  }

  //! `out[i] = cost(length, sizes[i])` bit for bit (the planner's cost table asks for a row at
  //! once), with the divisions done once per length: at a power-of-two size every term is the
  //! one-rank term times a power of two, and scaling by a power of two is exact, so it commutes
  //! with every rounding here. Other sizes go through `cost`.
  void costs(std::int64_t length, std::span<const std::int32_t> sizes,
             std::span<double> out) const noexcept {
    const double l = static_cast<double>(length);
    const double linear_one = linear_flops_per_token_ * l / device_.matmul_flops;
    const double forward_one = attention_flops_per_token2_ * l * l / device_.attention_flops;
    const double step_compute_one = forward_one / model_.layers;
    const link_tier& intra = device_.network.intra_node;
    const link_tier& inter = device_.network.inter_node;
    const double transfer_intra = kv_bytes_per_token_ * l / intra.bytes_per_second;
    const double transfer_inter = kv_bytes_per_token_ * l / inter.bytes_per_second;
    for (std::size_t i = 0; i < sizes.size() && i < out.size(); ++i) {
      const std::int32_t cp = sizes[i];
      if (!is_power_of_two(cp)) {
        out[i] = cost(length, cp);
        continue;
      }
      const double inverse = inverse_of_power_of_two(cp);
      const double linear = linear_one * inverse;
      const double attention = 3.5 * (forward_one * inverse);
      if (cp == 1) {
        out[i] = linear + attention;
        continue;
      }
      const double step_compute = step_compute_one * inverse * inverse;
      const bool spans = device_.network.spans_nodes(cp);
      const double latency = spans ? inter.latency : intra.latency;
      const double transfer_one = spans ? transfer_inter : transfer_intra;
      const double forward_step = latency + transfer_one * inverse;
      const double backward_step = latency + 2.0 * transfer_one * inverse;
      const double exposed = std::max(0.0, forward_step - step_compute) +
                             std::max(0.0, backward_step - 2.5 * step_compute);
      out[i] = linear + attention + (static_cast<double>(cp) - 1.0) * model_.layers * exposed;
    }
  }

  //! Fixed seconds per micro-batch (`device_spec::microbatch_overhead`).
  [[nodiscard]] double microbatch_overhead() const noexcept { return device_.microbatch_overhead; }

  [[nodiscard]] const model_shape& model() const noexcept { return model_; }
  [[nodiscard]] const device_spec& device() const noexcept { return device_; }
  //! The network it prices the ring on (recorded in the plan).
  [[nodiscard]] const network_spec& network() const noexcept { return device_.network; }
  [[nodiscard]] std::string name() const { return fmt::format("{}@{}", model_.name, device_.name); }

  //! "MODEL@DEVICE" or "MODEL" (device h100), e.g. "llama3-70b@a100".
  static std::optional<transformer_cost> from_preset(std::string_view spec) {
    const auto at = spec.find('@');
    const std::string_view model_name = spec.substr(0, at);
    const std::string_view device_name =
        at == std::string_view::npos ? std::string_view{"h100"} : spec.substr(at + 1);
    const auto m = std::find_if(model_presets.begin(), model_presets.end(),
                                [&](const model_shape& s) { return s.name == model_name; });
    const auto d = std::find_if(device_presets.begin(), device_presets.end(),
                                [&](const device_spec& s) { return s.name == device_name; });
    if (m == model_presets.end() || d == device_presets.end())
      return std::nullopt;
    return transformer_cost(*m, *d);
  }

  //! Names accepted by from_preset, for help texts and errors.
  static std::string preset_names() {
    std::string out;
    for (const auto& m : model_presets)
      for (const auto& d : device_presets)
        out += fmt::format("{}{}@{}", out.empty() ? "" : ", ", m.name, d.name);
    return out;
  }

private:
  //! 2^-k for cp = 2^k, built from its exponent bits (exact): x * it has the bits of x / cp.
  static double inverse_of_power_of_two(std::int32_t cp) noexcept {
    return std::bit_cast<double>((std::uint64_t{1023} - static_cast<std::uint64_t>(std::countr_zero(
                                                            static_cast<std::uint32_t>(cp))))
                                 << 52);
  }

  model_shape model_;
  device_spec device_;
  double linear_flops_per_token_ = 0;
  double attention_flops_per_token2_ = 0;
  double kv_bytes_per_token_ = 0;
};
static_assert(workload_estimator<transformer_cost>);

//! Megatron-LM's cost view, length^2 / cp, with the ring's price in the same unit, so that a
//! larger group is no longer free (length^2 / cp alone puts every sample on all ranks):
//!   cost(L, c) = L^2 / c + (c - 1) x layers x (exposed forward step + exposed backward step)
//! where, per layer and ring step, in units of one token^2 of attention (forward and backward):
//!   compute  = (L^2 / c) / 3.5 / c / layers          (the rank's forward share of one step)
//!   forward  = max(0, latency + kv_bytes x (L / c) / bandwidth         - compute) / unit
//!   backward = max(0, latency + 2 x kv_bytes x (L / c) / bandwidth     - 2.5 x compute) / unit
//! `unit` = 3.5 x 2 x query_width x layers / attention FLOP/s: the seconds of one token^2, and
//! latency and bandwidth are the tier the ring crosses (`network_spec::tier`). The ring term is
//! `transformer_cost`'s, divided by the same unit; the linear layers stay out, as in Megatron's
//! view. A micro-batch costs the device's overhead in the same unit. Defaults: llama3-8b on H100
//! nodes of 8.
class megatron_cost {
public:
  megatron_cost() : megatron_cost(model_presets[0], device_presets[0]) {}
  megatron_cost(const model_shape& model, const device_spec& device)
      : network_(device.network), layers_(model.layers) {
    const double forward_seconds_per_token2 =
        2.0 * model.query_width() * model.layers / device.attention_flops;
    seconds_per_unit_ = 3.5 * forward_seconds_per_token2;
    kv_bytes_per_token_ = 2.0 * model.kv_width() * device.bytes_per_element;
    microbatch_overhead_ = device.microbatch_overhead / seconds_per_unit_;
  }

  [[nodiscard]] static std::string name() { return "megatron"; }

  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const noexcept {
    const double l = static_cast<double>(length);
    const double c = static_cast<double>(cp);
    const double compute = l * l / c;
    if (cp <= 1)
      return compute;
    const double step_compute = compute / 3.5 / c / layers_; // token^2 units
    const double step_bytes = kv_bytes_per_token_ * (l / c);
    const link_tier& link = network_.tier(cp);
    const double forward = (link.latency + step_bytes / link.bytes_per_second) / seconds_per_unit_;
    const double backward =
        (link.latency + 2.0 * step_bytes / link.bytes_per_second) / seconds_per_unit_;
    const double exposed =
        std::max(0.0, forward - step_compute) + std::max(0.0, backward - 2.5 * step_compute);
    return compute + (c - 1.0) * layers_ * exposed;
  }

  //! The device's seconds per micro-batch (`device_spec::microbatch_overhead`), in its unit.
  [[nodiscard]] double microbatch_overhead() const noexcept { return microbatch_overhead_; }
  //! The network it prices the ring on (recorded in the plan).
  [[nodiscard]] const network_spec& network() const noexcept { return network_; }
  //! Seconds of one unit (one token^2 of attention, forward and backward).
  [[nodiscard]] double seconds_per_unit() const noexcept { return seconds_per_unit_; }

  //! The same model with the network `net` (e.g. other node sizes or links).
  [[nodiscard]] megatron_cost with_network(const network_spec& net) const {
    megatron_cost out = *this;
    out.network_ = net;
    return out;
  }

private:
  network_spec network_;
  double layers_ = 32;
  double seconds_per_unit_ = 1;
  double kv_bytes_per_token_ = 0;
  double microbatch_overhead_ = 0;
};
static_assert(workload_estimator<megatron_cost>);

} // namespace dcpp
