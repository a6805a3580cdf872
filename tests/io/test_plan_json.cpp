// Tests for include/dcpp/io/plan_json.hpp: round trip and errors that name the field.
#include "../support.hpp"

#include <string>
#include <utility>
#include <vector>

#include "dcpp/io/plan_json.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
dcpp::plan_options opts() {
  dcpp::plan_options o;
  o.world_size = 24;
  o.max_tokens_per_rank = 4096;
  o.microbatch_multiple = 2;
  return o;
}
} // namespace

TEST_CASE("plan_json: write then read gives the same plan, for seeded workloads") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const auto lengths = dcpp::workload::long_tail(40 + seed * 13, seed, 0.05, 65536);
    const dcpp::planner<> planner(opts());
    const auto p = planner.make_plan(lengths);
    const std::string text = dcpp::write_plan_json(p, opts());
    const auto back = dcpp::read_plan_json(text);
    CHECK(back.world_size == p.world_size);
    CHECK(back.max_tokens_per_rank == p.max_tokens_per_rank);
    CHECK(back.lengths == p.lengths);
    CHECK(back.microbatches == p.microbatches); // times survive the shortest round-trip format
    CHECK(back.metrics.estimated_step_time == p.metrics.estimated_step_time);
    CHECK(back.policy == "balanced");
    CHECK(back.network == p.network); // the two-tier network the default estimator priced
    REQUIRE(back.network.has_value());
    CHECK(back.network->inter_node.bytes_per_second == 40e9);
    CHECK(back.metrics.microbatch_overhead == p.metrics.microbatch_overhead);
    CHECK(dcpp::plan_hash(back) == dcpp::plan_hash(p));
    CHECK(dcpp::validate(back, opts()).ok());
    CHECK(dcpp::write_plan_json(back, opts()) == text);
  }
}

TEST_CASE("plan_json: a name that is not UTF-8 is written with U+FFFD, not refused") {
  // an estimator `calibrated:caf\xE9.csv` (a Latin-1 file name) made dcpp-plan --json fail with
  // "internal error: [json.exception.type_error.316] invalid UTF-8 byte"
  auto p = dcpp::planner<>(opts()).make_plan(dcpp::workload::long_tail(50, 3, 0.05, 65536));
  p.estimator = "calibrated:caf\xE9.csv";
  const auto back = dcpp::read_plan_json(dcpp::write_plan_json(p, opts()));
  CHECK(back.estimator == "calibrated:caf\xEF\xBF\xBD.csv");
  CHECK(back.microbatches == p.microbatches);
}

TEST_CASE("plan_json: the micro-batch overhead option, a network without rates, none") {
  auto o = opts();
  o.microbatch_overhead = 0.0125;
  const std::vector<std::int64_t> lengths{4000, 300, 9000, 12000, 70};
  const auto by_megatron = dcpp::planner<dcpp::length_squared_cost>(o).make_plan(lengths);
  const std::string text = dcpp::write_plan_json(by_megatron, o);
  CHECK(text.find("\"network\": null") != std::string::npos);
  CHECK(text.find("\"microbatch_overhead\":0.0125") != std::string::npos);
  const auto back = dcpp::read_plan_json(text);
  CHECK_FALSE(back.network.has_value());
  CHECK(back.metrics.microbatch_overhead == 0.0125);
  // a calibration states the node size only: its tiers are written as null and read as zero
  dcpp::plan with_nodes = by_megatron;
  with_nodes.network = dcpp::network_spec{4, {}, {}};
  const auto nodes = dcpp::read_plan_json(dcpp::write_plan_json(with_nodes, o));
  REQUIRE(nodes.network.has_value());
  CHECK(nodes.network->gpus_per_node == 4);
  CHECK(nodes.network->intra_node.bytes_per_second == 0.0);
  CHECK(nodes.network->inter_node == dcpp::link_tier{});
  CHECK_THROWS_WITH_AS(
      dcpp::read_plan_json(R"({"format": "dcpp-plan/1", "world_size": 4, "max_tokens_per_rank": 9,
                               "lengths": [3], "network": {"gpus_per_node": "eight"},
                               "microbatches": []})"),
      doctest::Contains("network: field 'gpus_per_node' = \"eight\" must be an integer in "
                        "[-2147483648, 2147483647]"),
      dcpp::error);
}

TEST_CASE("plan_json: the DESIGN.md example reads") {
  const char* text = R"({
    "format": "dcpp-plan/1", "world_size": 32, "max_tokens_per_rank": 4096,
    "lengths": [1830, 65536, 412],
    "microbatches": [{"groups": [{"first_rank": 0, "cp": 16, "samples": [1]},
                                 {"first_rank": 16, "cp": 1, "samples": [0, 2]}]}],
    "metrics": {"estimated_step_time": 0.0, "lower_bound": 0.0, "efficiency": 0.0}})";
  const auto p = dcpp::read_plan_json(text);
  CHECK(p.microbatches.size() == 1);
  CHECK(p.microbatches[0].groups[1].samples == std::vector<std::int32_t>{0, 2});
  dcpp::plan_options o;
  o.world_size = 32;
  o.max_tokens_per_rank = 4096;
  CHECK(dcpp::validate(p, o).ok());
}

TEST_CASE("plan_json: malformed documents name what is wrong") {
  // found by the fuzzer: a count in the metrics far out of range was cast from double to int
  CHECK_THROWS_WITH_AS(
      dcpp::read_plan_json(R"({"format": "dcpp-plan/1", "world_size": 4, "max_tokens_per_rank": 9,
                               "lengths": [3], "microbatches": [],
                               "metrics": {"min_microbatches": 1e+21}})"),
      doctest::Contains("plan: metrics: field 'min_microbatches' = 1e+21 must be an integer "
                        "in [-2147483648, 2147483647]"),
      dcpp::error);
  CHECK_THROWS_WITH_AS(
      dcpp::read_plan_json(R"({"format": "dcpp-plan/1", "world_size": 4, "max_tokens_per_rank": 9,
                               "lengths": [3], "microbatches": [],
                               "metrics": {"idle_rank_slots": 2.5}})"),
      doctest::Contains("plan: metrics: field 'idle_rank_slots' = 2.5 must be an integer"),
      dcpp::error);
  CHECK_THROWS_WITH_AS(dcpp::read_plan_json("{", "x.json"),
                       doctest::Contains("x.json: not valid JSON"), dcpp::error);
  CHECK_THROWS_WITH_AS(dcpp::read_plan_json(R"({"format": "other/2"})"),
                       doctest::Contains("format = 'other/2', expected 'dcpp-plan/1'"),
                       dcpp::error);
  // a format string of a megabyte is quoted cut (it was quoted whole)
  CHECK_THROWS_WITH_AS(dcpp::read_plan_json("{\"format\": \"" + std::string(1 << 20, 'f') + "\"}"),
                       ("plan: format = '" + std::string(40, 'f') +
                        "...' (1048576 characters), expected 'dcpp-plan/1'")
                           .c_str(),
                       dcpp::error);
  CHECK_THROWS_WITH_AS(dcpp::read_plan_json(R"({"format": "dcpp-plan/1", "world_size": 4})"),
                       doctest::Contains("missing field 'max_tokens_per_rank'"), dcpp::error);
  CHECK_THROWS_WITH_AS(
      dcpp::read_plan_json(R"({"format": "dcpp-plan/1", "world_size": 4, "max_tokens_per_rank": 9,
                               "lengths": [3], "microbatches": [{"groups": [{"first_rank": 0, "cp": "two", "samples": [0]}]}]})"),
      doctest::Contains("microbatches[0].groups[0]: field 'cp' = \"two\" must be an integer"),
      dcpp::error);
}

TEST_CASE("plan_json: negative, infinite and impossible recorded values are refused, naming them") {
  const auto doc = [](const std::string& group, const std::string& microbatch,
                      const std::string& metrics) {
    return R"({"format": "dcpp-plan/1", "world_size": 4, "max_tokens_per_rank": 4096,
               "lengths": [100], "microbatches": [{"groups": [{"first_rank": 0, "cp": 1,
               "samples": [0])" +
           group + "}]" + microbatch + "}], \"metrics\": {" + metrics + "}}";
  };
  CHECK_NOTHROW((void)dcpp::read_plan_json(
      doc(R"(, "tokens": 128, "time": 0.5)", R"(, "time": 0.5, "idle_ranks": 3)",
          R"("estimated_step_time": 0.5, "efficiency": null)")));
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {doc(R"(, "time": -1)", "", ""),
            "plan: microbatches[0].groups[0]: 'time' = -1 must be a finite number >= 0"},
           {doc(R"(, "tokens": 1000000000000)", "", ""),
            "plan: microbatches[0].groups[0]: 'tokens' = 1000000000000 must be from 0 to 4096 "
            "(max_tokens_per_rank)"},
           {doc(R"(, "tokens": -5)", "", ""),
            "plan: microbatches[0].groups[0]: 'tokens' = -5 must be from 0 to 4096"},
           {doc("", R"(, "time": 1e400)", ""), "number overflow parsing '1e400'"},
           {doc("", R"(, "idle_ranks": 7)", ""),
            "plan: microbatches[0]: 'idle_ranks' = 7 must be from 0 to 4 (world_size)"},
           {doc("", "", R"("estimated_step_time": -0.5)"),
            "plan: metrics: 'estimated_step_time' = -0.5 must be a finite number >= 0"},
           {doc("", "", R"("lower_bound": "fast")"), "plan: metrics: field 'lower_bound'"}}) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS((void)dcpp::read_plan_json(text), doctest::Contains(message.c_str()),
                         dcpp::error);
  }
}
