// dcpp-plan: plans dynamic context parallelism for a batch of sample lengths; prints a table,
// writes the dcpp-plan/1 JSON and an SVG picture.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "dcpp/dcpp.hpp"
#include "dcpp/io/atomic_file.hpp"
#include "dcpp/io/by_name.hpp"
#include "dcpp/io/file_input.hpp"
#include "dcpp/io/guarded_main.hpp"

#include "cli_checks.hpp"

namespace {

//! Where the progress lines go: stdout, or stderr when stdout carries a document (`--json -`).
std::FILE* info = stdout;

//! The estimator `spec` names, and the calibration's fit report when it is one.
dcpp::named_estimator parse_estimator(const std::string& spec, const dcpp::network_overrides& net) {
  auto named = dcpp::estimator_from_spec(spec, net);
  if (const auto* fitted = std::get_if<dcpp::calibrated_cost>(&named.estimator)) {
    const auto& r = fitted->report();
    fmt::print(info,
               "calibrated: {} coefficients from {} rows ({} GPUs per node); relative residual "
               "rms {:.2f}%, max {:.2f}% (row {}); the ring in the {} form\n",
               r.coefficients, r.rows, fitted->gpus_per_node(), 100 * r.rms_relative,
               100 * r.max_relative, r.worst_row, r.form);
    if (r.envelope_lift > 0)
      fmt::print(info,
                 "calibrated: the fitted formula falls as the length grows; priced by its running "
                 "maximum, up to {:.2f}% above it (length {} on {} ranks)\n",
                 100 * r.envelope_lift, r.lift_length, r.lift_cp);
  }
  return named;
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
  try {
    out.result = dcpp::plan_named(options, estimator, estimator_name, packing, lengths);
  } catch (const dcpp::error& e) {
    out.error = e.what();
  }
  return out;
}

void print_compare(const std::vector<outcome>& outcomes) {
  fmt::print(info, "\n{:<16} {:>12} {:>10} {:>13} {:>12} {:>12} {:>10}\n", "policy", "step time",
             "efficiency", "micro-batches", "max load", "mean load", "plan ms");
  for (const auto& o : outcomes) {
    if (!o.result) {
      fmt::print(info, "{:<16} n/a: {}\n", o.policy, o.error);
      continue;
    }
    const auto& m = o.result->metrics;
    fmt::print(info, "{:<16} {:>12.6g} {:>10.4f} {:>13} {:>12.6g} {:>12.6g} {:>10.3f}\n", o.policy,
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
  dcpp::network_overrides network;
  std::string json_path;
  std::string svg_path;
  bool compare = false;
  bool quiet = false;
  app.add_option("input", input, "lengths file, or - for stdin")
      ->required()
      ->check(dcpp_cli::path());
  app.add_option("--world-size", world_size, "ranks N (default: the input's total_gpus, else 8)")
      ->transform(dcpp_cli::decimal(world_size));
  app.add_option("--max-tokens-per-rank", max_tokens,
                 "token budget M per rank and micro-batch (default: the input's "
                 "max_seq_len_per_rank, else 4096)")
      ->transform(dcpp_cli::decimal(max_tokens));
  app.add_option("--min-cp", min_cp, "smallest CP group (default: the input's min_cp_size, else 1)")
      ->transform(dcpp_cli::decimal(min_cp));
  app.add_option("--max-cp", max_cp, "largest CP group (0: world size)")
      ->transform(dcpp_cli::decimal(max_cp));
  app.add_option("--policy", policy, "balanced | megatron_greedy | uniform_cp | static_cp")
      ->check(CLI::IsMember({"balanced", "megatron_greedy", "uniform_cp", "static_cp"}));
  app.add_option("--static-cp", static_cp_size, "CP size of static_cp (0: smallest that fits all)")
      ->transform(dcpp_cli::decimal(static_cp_size));
  app.add_option(
      "--estimator", estimator_spec,
      "MODEL@DEVICE preset (" + dcpp::transformer_cost::preset_names() +
          "), megatron (length^2/cp and the ring's price, h100 nodes of 8), length2 (length^2/cp "
          "alone), or calibrated:FILE (CSV rows length,cp,seconds "
          "and optionally microbatch,seconds)");
  app.add_option("--gpus-per-node", network.gpus_per_node,
                 "GPUs per node: CP groups larger than this span nodes and run their ring at the "
                 "inter-node rate (default 8)")
      ->transform(dcpp_cli::decimal(network.gpus_per_node))
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--intra-node-bandwidth", network.intra_node_gbytes,
                 "GB/s one way between ring neighbours inside a node (preset: h100 150, a100 100)")
      ->check(dcpp_cli::finite_above(0));
  app.add_option("--inter-node-bandwidth", network.inter_node_gbytes,
                 "GB/s one way between ring neighbours on different nodes (preset: h100 40, "
                 "a100 20)")
      ->check(dcpp_cli::finite_above(0));
  app.add_option("--microbatch-overhead", microbatch_overhead,
                 "price of one micro-batch in the estimator's unit (seconds for presets and "
                 "calibrations; default: the estimator's, else 1% of the batch's mean "
                 "micro-batch)")
      ->check(dcpp_cli::finite_at_least(0));
  app.add_option("--topology", topology_name,
                 "aligned (powers of two) | contiguous | megatron (Megatron-LM's groups: powers "
                 "of two below the largest one <= N, and all N; every rank busy in every "
                 "micro-batch)")
      ->check(CLI::IsMember({"aligned", "contiguous", "megatron"}));
  app.add_option("--microbatch-multiple", microbatch_multiple,
                 "micro-batch count multiple, e.g. for virtual pipeline stages (default: the "
                 "input's vpp_microbatch_group_size, else 1)")
      ->transform(dcpp_cli::decimal(microbatch_multiple));
  app.add_option("--padding-unit", padding_unit, "samples pad to a multiple of 2*cp*padding_unit")
      ->transform(dcpp_cli::decimal(padding_unit));
  app.add_option("--extra-microbatches", extra_microbatches,
                 "balanced: at most this many micro-batches beyond the token minimum, each "
                 "taken only when it saves more than its overhead (-1: up to as many again)")
      ->transform(dcpp_cli::decimal(extra_microbatches))
      ->check(CLI::Range(-1, 1 << 20));
  app.add_option("--json", json_path,
                 "write the plan as dcpp-plan/1 JSON (-: to standard output, alone; the other "
                 "lines then go to standard error)")
      ->check(dcpp_cli::path());
  app.add_option("--svg", svg_path, "write a picture of the plan (-: to standard output)")
      ->check(dcpp_cli::path());
  app.add_flag("--compare", compare, "plan with every policy and print them side by side");
  app.add_flag("--quiet", quiet, "no per-micro-batch table");
  CLI11_PARSE(app, argc, argv);
  info = (json_path == "-" || svg_path == "-") ? stderr : stdout;

  return dcpp::guarded_main("dcpp-plan: error: ", [&]() -> int {
    if (app.count("--static-cp") > 0 && !compare && policy != "static_cp")
      throw dcpp::error(dcpp::status_code::invalid_option,
                        fmt::format("--static-cp {} applies to --policy static_cp only; the "
                                    "policy is {} (add --policy static_cp, or drop --static-cp)",
                                    static_cp_size, policy));
    dcpp::batch_input batch;
    {
      // the whole text first: a directory, an unreadable file or a read error is named here
      constexpr auto text = dcpp::file_content::text;
      std::istringstream in(input == "-"
                                ? dcpp::read_standard_input("input", dcpp::batch_input_limit, text)
                                : dcpp::read_file(input, "input", dcpp::batch_input_limit, text));
      batch = dcpp::read_batch(in, input == "-" ? "<stdin>" : input);
    }
    dcpp::plan_options options;
    options.world_size = world_size.value_or(batch.world_size.value_or(8));
    options.max_tokens_per_rank = max_tokens.value_or(batch.max_tokens_per_rank.value_or(4096));
    options.min_cp = min_cp.value_or(batch.min_cp.value_or(1));
    options.max_cp = max_cp;
    options.group_topology = *dcpp::topology_from_string(topology_name); // checked by CLI11
    options.padding_unit = padding_unit;
    options.microbatch_multiple =
        microbatch_multiple.value_or(batch.microbatch_multiple.value_or(1));
    options.microbatch_overhead = microbatch_overhead;
    dcpp::throw_if_failed(dcpp::check_problem(options, batch.lengths));
    const dcpp::named_estimator estimator = parse_estimator(estimator_spec, network);

    std::vector<outcome> outcomes;
    double budget_bound = 0; // dcpp::budget_lower_bound, outside the planning time
    std::visit(
        [&](const auto& e) {
          budget_bound = dcpp::budget_lower_bound(dcpp::make_problem(options, batch.lengths), e);
          // --compare: every policy, in the order of policy_names; else --policy
          for (const std::string_view name : dcpp::policy_names) {
            if (!compare && name != policy)
              continue;
            const dcpp::policy_choice choice{std::string(name), static_cp_size, extra_microbatches};
            outcomes.push_back(dcpp::with_policy(choice, [&](const auto& packing) {
              return run_policy(options, e, estimator.name, packing, batch.lengths);
            }));
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

    // Outputs: `-` is standard output (then every other line goes to standard error, so the
    // stream holds the document alone); files are staged beside their targets and renamed into
    // place only once both are written, so that a failure leaves no partial file and never
    // damages an existing one.
    if (json_path == "-" && svg_path == "-")
      throw dcpp::error(dcpp::status_code::invalid_option,
                        "--json - and --svg - both ask for standard output; give one a file");
    if (!json_path.empty() && json_path == svg_path)
      throw dcpp::error(dcpp::status_code::invalid_option,
                        fmt::format("--json and --svg both name '{}'; give two files", json_path));
    // one file by two names (./x and x, a link): the later write would replace the earlier,
    // and an output on an input would replace the input
    const std::string calibration =
        estimator_spec.rfind("calibrated:", 0) == 0 ? estimator_spec.substr(11) : "";
    for (const auto& [out, flag] :
         {std::pair{&json_path, "--json"}, std::pair{&svg_path, "--svg"}}) {
      if (out->empty() || *out == "-")
        continue;
      if (flag == std::string_view("--json") && !svg_path.empty() && svg_path != "-" &&
          dcpp::same_file(json_path, svg_path))
        throw dcpp::error(dcpp::status_code::invalid_option,
                          fmt::format("--json '{}' and --svg '{}' name the same file; give two "
                                      "files",
                                      json_path, svg_path));
      for (const auto& [in, what] :
           {std::pair<const std::string*, const char*>{&input, "the input"},
            std::pair<const std::string*, const char*>{&calibration, "the calibration file"}})
        if (!in->empty() && *in != "-" && dcpp::same_file(*out, *in))
          throw dcpp::error(dcpp::status_code::invalid_option,
                            fmt::format("{} '{}' names {} '{}': writing it would replace it; "
                                        "give another file",
                                        flag, *out, what, *in));
    }
    const std::string json_text = json_path.empty() ? "" : dcpp::write_plan_json(p, options);
    const std::string svg_text =
        svg_path.empty() ? ""
                         : dcpp::write_plan_svg(p, fmt::format("{} — {}", batch.name, p.policy));
    std::optional<dcpp::staged_file> json_file, svg_file;
    if (!json_path.empty() && json_path != "-")
      json_file.emplace(json_path, "--json");
    if (!svg_path.empty() && svg_path != "-")
      svg_file.emplace(svg_path, "--svg");
    if (json_file)
      json_file->write(json_text), json_file->close();
    if (svg_file)
      svg_file->write(svg_text), svg_file->close();

    fmt::print(info, "input {}: {} samples, lengths {}..{}\n", batch.name, batch.lengths.size(),
               *std::min_element(batch.lengths.begin(), batch.lengths.end()),
               *std::max_element(batch.lengths.begin(), batch.lengths.end()));
    if (quiet)
      fmt::print(info, "{} plan: step time {:.6g}, efficiency {:.4f}, micro-batches {}\n", p.policy,
                 p.metrics.estimated_step_time, p.metrics.efficiency, p.microbatches.size());
    else
      fmt::print(info, "{}", p);
    if (!quiet && budget_bound > p.metrics.lower_bound * (1 + 1e-12))
      fmt::print(info,
                 "  the budget-aware lower bound is {:.6g}: no plan can exceed "
                 "efficiency {:.4f} on this batch\n",
                 budget_bound, p.metrics.lower_bound / budget_bound);
    if (compare)
      print_compare(outcomes);
    if (json_file)
      json_file->commit(), fmt::print(info, "wrote {}\n", json_path);
    if (svg_file)
      svg_file->commit(), fmt::print(info, "wrote {}\n", svg_path);
    const std::string& to_stdout = json_path == "-" ? json_text : svg_text;
    if (json_path == "-" || svg_path == "-") {
      if (std::fwrite(to_stdout.data(), 1, to_stdout.size(), stdout) != to_stdout.size() ||
          std::fflush(stdout) != 0)
        throw dcpp::error(dcpp::status_code::io_error,
                          fmt::format("{}: cannot write standard output: {}",
                                      json_path == "-" ? "--json -" : "--svg -",
                                      std::strerror(errno)));
    }
    return dcpp::exit_success;
  });
}
