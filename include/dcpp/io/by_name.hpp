// Estimators and packing policies chosen by name, as the CLI (`dcpp-plan`) and the Python
// package (`dcpp.plan`) take them: one implementation, so that both make the same plan, with the
// same recorded estimator name, for the same input.
#pragma once

#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"
#include "dcpp/io/batch_input.hpp"
#include "dcpp/io/file_input.hpp"
#include "dcpp/planner/calibrated_cost.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/packing/balanced.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"
#include "dcpp/planner/packing/static_cp.hpp"
#include "dcpp/planner/packing/uniform_cp.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/planner/transformer_cost.hpp"

namespace dcpp {

//! The estimators a name can select.
using named_estimator_variant =
    std::variant<transformer_cost, megatron_cost, length_squared_cost, calibrated_cost>;

//! An estimator and the name a plan records for it (`plan::estimator`).
struct named_estimator {
  named_estimator_variant estimator;
  std::string name;
};

//! The network settings a user may give beside an estimator name; each overrides the preset's
//! value when set. Bandwidths in GB/s, one direction.
struct network_overrides {
  std::optional<std::int32_t> gpus_per_node;
  std::optional<double> intra_node_gbytes;
  std::optional<double> inter_node_gbytes;
};

//! How the caller spells its options, for error messages (the CLI's flags by default; the
//! Python package passes its keyword names).
struct option_spelling {
  std::string_view estimator = "--estimator";
  std::string_view gpus_per_node = "--gpus-per-node";
  std::string_view intra_node = "--intra-node-bandwidth";
  std::string_view inter_node = "--inter-node-bandwidth";
};

//! `calibrated_cost::fit` of `rows` on nodes of `gpus_per_node` GPUs (default 8), named `name`.
inline named_estimator calibrated_from_rows(std::span<const calibration_row> rows,
                                            std::optional<std::int32_t> gpus_per_node,
                                            std::string name) {
  return {calibrated_cost::fit(rows, gpus_per_node.value_or(8)), std::move(name)};
}

//! `device`'s network with the overrides of `net` applied, checked (`say` spells the options in
//! errors). Bandwidths are given in GB/s.
inline network_spec network_with(network_spec network, const network_overrides& net,
                                 std::string_view spec, const option_spelling& say) {
  if (net.gpus_per_node)
    network.gpus_per_node = *net.gpus_per_node;
  // GB/s to bytes/s, refused by the caller's name for the option where that is no positive
  // finite number (1e300 GB/s would be inf bytes/s)
  for (const auto& [gbytes, flag, tier] :
       {std::tuple{net.intra_node_gbytes, say.intra_node, &network.intra_node},
        std::tuple{net.inter_node_gbytes, say.inter_node, &network.inter_node}}) {
    if (!gbytes)
      continue;
    constexpr double most = std::numeric_limits<double>::max() / 1e9;
    if (!(*gbytes > 0 && *gbytes <= most))
      throw error(status_code::invalid_option,
                  fmt::format("{} = {} GB/s must be above 0 and at most {} (bytes/s in a double)",
                              flag, *gbytes, most));
    tier->bytes_per_second = *gbytes * 1e9;
  }
  if (const status s = network.check(); !s)
    throw error(s.code, fmt::format("{} {}: {}", say.estimator, spec, s.message));
  return network;
}

//! The estimator named by `spec`: `megatron` (length^2/cp and the ring's price on the network,
//! `megatron_cost`, with `net` applied), `length2` (length^2/cp alone, Megatron-LM's own view),
//! `calibrated:FILE` (CSV rows fitted, `read_calibration`), or a transformer preset
//! `MODEL@DEVICE` with `net` applied. Throws
//! dcpp::error naming the option and the value on an unknown name, an unreadable file, a fit that
//! cannot be determined, or network settings that do not apply to the estimator.
inline named_estimator estimator_from_spec(std::string_view spec, const network_overrides& net,
                                           const option_spelling& say = {}) {
  const bool rates = net.intra_node_gbytes || net.inter_node_gbytes;
  if (spec == "length2") {
    if (rates || net.gpus_per_node)
      throw error(status_code::invalid_option,
                  fmt::format("{}, {} and {} describe a network; {} length2 (length^2/cp) has "
                              "none (megatron prices the ring on one)",
                              say.gpus_per_node, say.intra_node, say.inter_node, say.estimator));
    return {length_squared_cost{}, "length2"};
  }
  if (spec == "megatron") {
    const megatron_cost base;
    return {base.with_network(network_with(base.network(), net, spec, say)), "megatron"};
  }
  if (spec.rfind("calibrated:", 0) == 0) {
    if (rates)
      throw error(status_code::invalid_option,
                  fmt::format("{} and {} do not apply to {} calibrated: the fit measures the "
                              "links (give {} for the node size the timings were taken on)",
                              say.intra_node, say.inter_node, say.estimator, say.gpus_per_node));
    const std::string path(spec.substr(11));
    std::istringstream in(read_file(path, fmt::format("{} calibrated", say.estimator),
                                    calibration_input_limit, file_content::text));
    return calibrated_from_rows(read_calibration(in, path), net.gpus_per_node, std::string(spec));
  }
  if (auto preset = transformer_cost::from_preset(spec)) {
    device_spec device = preset->device();
    device.network = network_with(device.network, net, spec, say);
    const transformer_cost model(preset->model(), device);
    return {model, model.name()};
  }
  throw error(
      status_code::invalid_option,
      fmt::format("{} '{}' is unknown; use megatron, length2, calibrated:FILE or a preset: {}",
                  say.estimator, spec, transformer_cost::preset_names()));
}

//! The packing policies by name.
inline constexpr std::string_view policy_names[] = {"balanced", "megatron_greedy", "uniform_cp",
                                                    "static_cp"};

//! A packing policy by name and its settings.
struct policy_choice {
  std::string name = "balanced";
  std::int32_t static_cp_size = 0;      //!< static_cp: the size (0: the smallest that fits all)
  std::int32_t extra_microbatches = -1; //!< balanced: `balanced::extra_microbatches`
};

//! Calls `f(packing)` with the packing policy `choice` names; throws dcpp::error on an unknown
//! name.
template <class F>
decltype(auto) with_policy(const policy_choice& choice, F&& f) {
  if (choice.name == "balanced") {
    balanced tuned;
    tuned.extra_microbatches = choice.extra_microbatches;
    return f(tuned);
  }
  if (choice.name == "megatron_greedy")
    return f(megatron_greedy{});
  if (choice.name == "uniform_cp")
    return f(uniform_cp{});
  if (choice.name == "static_cp")
    return f(static_cp{choice.static_cp_size});
  throw error(status_code::invalid_option,
              fmt::format("policy '{}' is unknown; use balanced, megatron_greedy, uniform_cp or "
                          "static_cp",
                          choice.name));
}

//! Plans `lengths` with `packing` under `estimator` and records `estimator_name` in the plan.
//! Throws dcpp::error when the batch cannot be planned (the message names the sample, value and
//! limit).
template <workload_estimator Estimator, class Packing>
plan plan_named(const plan_options& options, const Estimator& estimator,
                std::string_view estimator_name, const Packing& packing,
                std::span<const std::int64_t> lengths) {
  const planner<Estimator, Packing> p(options, estimator, packing);
  throw_if_failed(p.can_plan(lengths));
  if constexpr (std::is_same_v<Estimator, calibrated_cost>) {
    // a fit outside its rows may price samples at zero or at infinity
    const problem pr = make_problem(options, lengths);
    estimator.check_lengths(pr.lengths, pr.min_cp_of, pr.cp_sizes);
  }
  plan result = p.make_plan(lengths);
  result.estimator = std::string(estimator_name);
  return result;
}

} // namespace dcpp
