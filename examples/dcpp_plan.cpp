// dcpp-plan: plans dynamic context parallelism for a batch of sample lengths; prints a table,
// writes the dcpp-plan/1 JSON and an SVG picture.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "dcpp/dcpp.hpp"

namespace {

using estimator_choice =
    std::variant<dcpp::transformer_cost, dcpp::megatron_cost, dcpp::calibrated_cost>;

struct named_estimator {
  estimator_choice estimator;
  std::string name;
};

//! The network options: each overrides the preset's value when given.
struct network_options {
  std::optional<std::int32_t> gpus_per_node;
  std::optional<double> intra_node_gbytes; // GB/s, one direction
  std::optional<double> inter_node_gbytes;
};

named_estimator parse_estimator(const std::string& spec, const network_options& net) {
  const bool rates = net.intra_node_gbytes || net.inter_node_gbytes;
  if (spec == "megatron") {
    if (rates || net.gpus_per_node)
      throw dcpp::error(dcpp::status_code::invalid_option,
                        "--gpus-per-node and the link bandwidths describe the network of a "
                        "transformer preset or a calibration; --estimator megatron has none");
    return {dcpp::megatron_cost{}, "megatron"};
  }
  if (spec.rfind("calibrated:", 0) == 0) {
    if (rates)
      throw dcpp::error(dcpp::status_code::invalid_option,
                        "--intra-node-bandwidth and --inter-node-bandwidth do not apply to "
                        "--estimator calibrated: the fit measures the links (give "
                        "--gpus-per-node for the node size the timings were taken on)");
    const std::string path = spec.substr(11);
    std::ifstream in(path);
    if (!in)
      throw dcpp::error(dcpp::status_code::parse_error,
                        fmt::format("--estimator calibrated: cannot open '{}'", path));
    auto fitted =
        dcpp::calibrated_cost::fit(dcpp::read_calibration(in, path), net.gpus_per_node.value_or(8));
    const auto& r = fitted.report();
    fmt::print("calibrated: {} coefficients from {} rows ({} GPUs per node); relative residual "
               "rms {:.2f}%, max {:.2f}% (row {})\n",
               r.coefficients, r.rows, fitted.gpus_per_node(), 100 * r.rms_relative,
               100 * r.max_relative, r.worst_row);
    return {std::move(fitted), spec};
  }
  if (auto preset = dcpp::transformer_cost::from_preset(spec)) {
    dcpp::device_spec device = preset->device();
    if (net.gpus_per_node)
      device.network.gpus_per_node = *net.gpus_per_node;
    if (net.intra_node_gbytes)
      device.network.intra_node.bytes_per_second = *net.intra_node_gbytes * 1e9;
    if (net.inter_node_gbytes)
      device.network.inter_node.bytes_per_second = *net.inter_node_gbytes * 1e9;
    if (dcpp::status s = device.network.check(); !s)
      throw dcpp::error(s.code, fmt::format("--estimator {}: {}", spec, s.message));
    const dcpp::transformer_cost model(preset->model(), device);
    return {model, model.name()};
  }
  throw dcpp::error(dcpp::status_code::invalid_option,
                    fmt::format("--estimator '{}' is unknown; use megatron, calibrated:FILE or a "
                                "preset: {}",
                                spec, dcpp::transformer_cost::preset_names()));
}

struct outcome {
  std::string policy;
  std::optional<dcpp::plan> result;
  std::string error;
};

template <class Packing, class Estimator>
outcome run_policy(const dcpp::plan_options& options, const Estimator& estimator,
                   const std::string& estimator_name, Packing packing,
                   const std::vector<std::int64_t>& lengths) {
  outcome out{std::string(Packing::name), std::nullopt, {}};
  const dcpp::planner<Estimator, Packing> planner(options, estimator, packing);
  if (dcpp::status s = planner.can_plan(lengths); !s) {
    out.error = s.message;
    return out;
  }
  out.result = planner.make_plan(lengths);
  out.result->estimator = estimator_name;
  return out;
}

void print_compare(const std::vector<outcome>& outcomes) {
  fmt::print("\n{:<16} {:>12} {:>10} {:>13} {:>12} {:>12} {:>10}\n", "policy", "step time",
             "efficiency", "micro-batches", "max load", "mean load", "plan ms");
  for (const auto& o : outcomes) {
    if (!o.result) {
      fmt::print("{:<16} n/a: {}\n", o.policy, o.error);
      continue;
    }
    const auto& m = o.result->metrics;
    fmt::print("{:<16} {:>12.6g} {:>10.4f} {:>13} {:>12.6g} {:>12.6g} {:>10.3f}\n", o.policy,
               m.estimated_step_time, m.efficiency, o.result->microbatches.size(), m.max_rank_load,
               m.mean_rank_load, m.plan_seconds * 1e3);
  }
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"dcpp-plan: plan dynamic context parallelism for a batch of sample lengths.\n"
               "INPUT is a text file (one length per line, # comments), a JSON file with a "
               "'seqlens' array, or - for standard input."};
  app.set_version_flag("--version", "dcpp-plan 0.1.0");
  std::string input;
  std::optional<std::int32_t> world_size;
  std::optional<std::int64_t> max_tokens;
  std::optional<std::int32_t> min_cp;
  std::int32_t max_cp = 0;
  std::string policy = "balanced";
  std::int32_t static_cp_size = 0;
  std::string estimator_spec = "llama3-8b@h100";
  std::string topology_name = "aligned";
  std::optional<std::int32_t> microbatch_multiple;
  std::int64_t padding_unit = 1;
  std::int32_t extra_microbatches = -1;
  std::optional<double> microbatch_overhead;
  network_options network;
  std::string json_path;
  std::string svg_path;
  bool compare = false;
  bool quiet = false;
  app.add_option("input", input, "lengths file, or - for stdin")->required();
  app.add_option("--world-size", world_size, "ranks N (default: the input's total_gpus, else 8)");
  app.add_option("--max-tokens-per-rank", max_tokens,
                 "token budget M per rank and micro-batch (default: the input's "
                 "max_seq_len_per_rank, else 4096)");
  app.add_option("--min-cp", min_cp,
                 "smallest CP group (default: the input's min_cp_size, else 1)");
  app.add_option("--max-cp", max_cp, "largest CP group (0: world size)");
  app.add_option("--policy", policy, "balanced | megatron_greedy | uniform_cp | static_cp")
      ->check(CLI::IsMember({"balanced", "megatron_greedy", "uniform_cp", "static_cp"}));
  app.add_option("--static-cp", static_cp_size, "CP size of static_cp (0: smallest that fits all)");
  app.add_option("--estimator", estimator_spec,
                 "MODEL@DEVICE preset (" + dcpp::transformer_cost::preset_names() +
                     "), megatron (length^2/cp), or calibrated:FILE (CSV rows length,cp,seconds "
                     "and optionally microbatch,seconds)");
  app.add_option("--gpus-per-node", network.gpus_per_node,
                 "GPUs per node: CP groups larger than this span nodes and run their ring at the "
                 "inter-node rate (default 8)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--intra-node-bandwidth", network.intra_node_gbytes,
                 "GB/s one way between ring neighbours inside a node (preset: h100 150, a100 100)")
      ->check(CLI::PositiveNumber);
  app.add_option("--inter-node-bandwidth", network.inter_node_gbytes,
                 "GB/s one way between ring neighbours on different nodes (preset: h100 40, "
                 "a100 20)")
      ->check(CLI::PositiveNumber);
  app.add_option("--microbatch-overhead", microbatch_overhead,
                 "price of one micro-batch in the estimator's unit (seconds for presets and "
                 "calibrations; default: the estimator's, else 1% of the batch's mean "
                 "micro-batch)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--topology", topology_name, "aligned (powers of two) | contiguous")
      ->check(CLI::IsMember({"aligned", "contiguous"}));
  app.add_option("--microbatch-multiple", microbatch_multiple,
                 "micro-batch count multiple, e.g. for virtual pipeline stages (default: the "
                 "input's vpp_microbatch_group_size, else 1)");
  app.add_option("--padding-unit", padding_unit, "samples pad to a multiple of 2*cp*padding_unit");
  app.add_option("--extra-microbatches", extra_microbatches,
                 "balanced: at most this many micro-batches beyond the token minimum, each "
                 "taken only when it saves more than its overhead (-1: up to as many again)")
      ->check(CLI::Range(-1, 1 << 20));
  app.add_option("--json", json_path, "write the plan as dcpp-plan/1 JSON");
  app.add_option("--svg", svg_path, "write a picture of the plan");
  app.add_flag("--compare", compare, "plan with every policy and print them side by side");
  app.add_flag("--quiet", quiet, "no per-micro-batch table");
  CLI11_PARSE(app, argc, argv);

  try {
    dcpp::batch_input batch;
    if (input == "-") {
      batch = dcpp::read_batch(std::cin, "<stdin>");
    } else {
      std::ifstream in(input);
      if (!in)
        throw dcpp::error(dcpp::status_code::parse_error,
                          fmt::format("cannot open input '{}'", input));
      batch = dcpp::read_batch(in, input);
    }
    dcpp::plan_options options;
    options.world_size = world_size.value_or(batch.world_size.value_or(8));
    options.max_tokens_per_rank = max_tokens.value_or(batch.max_tokens_per_rank.value_or(4096));
    options.min_cp = min_cp.value_or(batch.min_cp.value_or(1));
    options.max_cp = max_cp;
    options.group_topology =
        topology_name == "contiguous" ? dcpp::topology::contiguous : dcpp::topology::aligned;
    options.padding_unit = padding_unit;
    options.microbatch_multiple =
        microbatch_multiple.value_or(batch.microbatch_multiple.value_or(1));
    options.microbatch_overhead = microbatch_overhead;
    dcpp::throw_if_failed(dcpp::check_problem(options, batch.lengths));
    const named_estimator estimator = parse_estimator(estimator_spec, network);

    std::vector<outcome> outcomes;
    double budget_bound = 0; // dcpp::budget_lower_bound, outside the planning time
    std::visit(
        [&](const auto& e) {
          budget_bound = dcpp::budget_lower_bound(dcpp::make_problem(options, batch.lengths), e);
          const dcpp::static_cp fixed{static_cp_size};
          dcpp::balanced tuned;
          tuned.extra_microbatches = extra_microbatches;
          if (compare) {
            outcomes.push_back(run_policy(options, e, estimator.name, tuned, batch.lengths));
            outcomes.push_back(
                run_policy(options, e, estimator.name, dcpp::megatron_greedy{}, batch.lengths));
            outcomes.push_back(
                run_policy(options, e, estimator.name, dcpp::uniform_cp{}, batch.lengths));
            outcomes.push_back(run_policy(options, e, estimator.name, fixed, batch.lengths));
          } else if (policy == "balanced") {
            outcomes.push_back(run_policy(options, e, estimator.name, tuned, batch.lengths));
          } else if (policy == "megatron_greedy") {
            outcomes.push_back(
                run_policy(options, e, estimator.name, dcpp::megatron_greedy{}, batch.lengths));
          } else if (policy == "uniform_cp") {
            outcomes.push_back(
                run_policy(options, e, estimator.name, dcpp::uniform_cp{}, batch.lengths));
          } else {
            outcomes.push_back(run_policy(options, e, estimator.name, fixed, batch.lengths));
          }
        },
        estimator.estimator);
    const outcome* chosen = nullptr;
    for (const auto& o : outcomes)
      if (o.policy == policy)
        chosen = &o;
    if (chosen == nullptr || !chosen->result)
      throw dcpp::error(dcpp::status_code::infeasible,
                        fmt::format("policy {}: {}", policy, chosen ? chosen->error : "not run"));
    const dcpp::plan& p = *chosen->result;

    // open every output before writing any, so that an error leaves nothing half written
    std::ofstream json_out;
    std::ofstream svg_out;
    if (!json_path.empty()) {
      json_out.open(json_path);
      if (!json_out)
        throw dcpp::error(dcpp::status_code::parse_error,
                          fmt::format("--json: cannot write '{}'", json_path));
    }
    if (!svg_path.empty()) {
      svg_out.open(svg_path);
      if (!svg_out)
        throw dcpp::error(dcpp::status_code::parse_error,
                          fmt::format("--svg: cannot write '{}'", svg_path));
    }
    fmt::print("input {}: {} samples, lengths {}..{}\n", batch.name, batch.lengths.size(),
               *std::min_element(batch.lengths.begin(), batch.lengths.end()),
               *std::max_element(batch.lengths.begin(), batch.lengths.end()));
    if (quiet)
      fmt::print("{} plan: step time {:.6g}, efficiency {:.4f}, micro-batches {}\n", p.policy,
                 p.metrics.estimated_step_time, p.metrics.efficiency, p.microbatches.size());
    else
      fmt::print("{}", p);
    if (!quiet && budget_bound > p.metrics.lower_bound * (1 + 1e-12))
      fmt::print("  the token budget raises the lower bound to {:.6g}: no plan can exceed "
                 "efficiency {:.4f} on this batch\n",
                 budget_bound, p.metrics.lower_bound / budget_bound);
    if (compare)
      print_compare(outcomes);
    if (json_out.is_open()) {
      json_out << dcpp::write_plan_json(p, options);
      fmt::print("wrote {}\n", json_path);
    }
    if (svg_out.is_open()) {
      svg_out << dcpp::write_plan_svg(p, fmt::format("{} — {}", batch.name, p.policy));
      fmt::print("wrote {}\n", svg_path);
    }
  } catch (const dcpp::error& e) {
    fmt::print(stderr, "dcpp-plan: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
