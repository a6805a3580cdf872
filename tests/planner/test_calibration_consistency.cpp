// The calibration's self-consistency: `calibrated_cost` fitted to timings generated from a known
// two-tier transformer model plans within 1% of that model (step time under the model), on every
// generated benchmark workload (bench/planner_cases.hpp; in the sanitizer build one seed per
// generator, each under one of the two models).
#include "../support.hpp"
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "dcpp/planner/calibrated_cost.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/planner/transformer_cost.hpp"
#include "dcpp/workload/generators.hpp"
#include "planner_cases.hpp"

namespace {

//! What a measurement campaign would record from `truth`: samples of lengths a factor 1.1
//! apart from 512 to 1M tokens on every power-of-two group of 1 to 256 ranks that gives each
//! rank 64 to 64K tokens, and two measured micro-batch overheads.
std::vector<dcpp::calibration_row> timings_of(const dcpp::transformer_cost& truth) {
  std::vector<dcpp::calibration_row> rows;
  for (double l = 512; l <= 1 << 20; l *= 1.1)
    for (std::int32_t cp = 1; cp <= 256; cp *= 2) {
      const auto length = static_cast<std::int64_t>(l);
      if (length / cp < 64 || length / cp > 65536)
        continue;
      rows.push_back({length, cp, truth.cost(length, cp), false});
    }
  const double overhead = truth.microbatch_overhead();
  rows.push_back({0, 0, overhead, true});
  rows.push_back({0, 0, overhead, true});
  return rows;
}

//! `half`: which half of the cases the sanitizer build (DCPP_TESTS_QUICK) plans, 0 or 1 (every
//! other case), so that its two calls cover every generator once. `hinges`: the fit in the hinge
//! form alone (`fit` keeps the exposure form, which prices these rows exactly).
void check_consistency(const dcpp::transformer_cost& truth, std::size_t half, bool hinges) {
  const auto rows = timings_of(truth);
  const std::int32_t node = truth.network().gpus_per_node;
  const dcpp::calibrated_cost fitted = hinges ? dcpp::calibrated_cost::fit_hinges(rows, node)
                                              : dcpp::calibrated_cost::fit(rows, node);
  CHECK(fitted.report().form == (hinges ? "hinge" : "exposure"));
  MESSAGE(truth.name() << ": fit to " << fitted.report().rows << " rows, relative residual rms "
                       << fitted.report().rms_relative << ", max " << fitted.report().max_relative);
  CHECK(fitted.report().rms_relative < 0.01);
  CHECK(fitted.microbatch_overhead() == doctest::Approx(truth.microbatch_overhead()));
  double worst = 0;
  // the sanitizer build (DCPP_TESTS_QUICK) plans one seed per generator, and of those every
  // other case (`half`). Both plans come from
  // the default portfolio, the one users run: a portfolio reduced to save time is no check of
  // it, and without the chunked and bisected constructions a fit a hair off the model can tip
  // a sample's size of least area (where sizes tie on area) into a much slower plan
  const dcpp::balanced policy;
  const auto cases = dcpp_bench::generated_cases(dcpp_test::quick());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (dcpp_test::quick() && i % 2 != half)
      continue;
    const auto& c = cases[i];
    CAPTURE(c.name);
    const dcpp::planner<dcpp::transformer_cost, dcpp::balanced> by_model(c.options, truth, policy);
    const dcpp::planner<dcpp::calibrated_cost, dcpp::balanced> by_fit(c.options, fitted, policy);
    // the sanity check dcpp-plan and Python apply passes a fit of a real model's timings
    const auto pr = dcpp::make_problem(c.options, c.lengths);
    CHECK_NOTHROW(fitted.check_lengths(pr.lengths, pr.min_cp_of, pr.cp_sizes));
    const dcpp::plan ideal = by_model.make_plan(c.lengths);
    dcpp::plan calibrated = by_fit.make_plan(c.lengths);
    // the calibrated plan, timed by the model it was fitted to
    dcpp::evaluate(calibrated, dcpp::make_problem(c.options, c.lengths), truth);
    const double ratio = calibrated.metrics.estimated_step_time / ideal.metrics.estimated_step_time;
    worst = std::max(worst, ratio);
    CHECK(ratio <= 1.01);
  }
  MESSAGE(truth.name() << ": the calibrated plans are at most " << (worst - 1) * 100
                       << "% slower under the model");
}

} // namespace

TEST_CASE("calibration: a fit to a two-tier model's timings plans within 1% of the model") {
  check_consistency(dcpp::transformer_cost{}, 0, false); // llama3-8b on h100, 8 GPUs per node
}

TEST_CASE("calibration: the same on a100 nodes of 4 GPUs with a 70B model, hinge form") {
  dcpp::device_spec a100 = dcpp::transformer_cost::from_preset("llama3-70b@a100")->device();
  a100.network.gpus_per_node = 4;
  check_consistency(dcpp::transformer_cost(dcpp::model_presets[1], a100), 1, true);
}

TEST_CASE("calibration: a sparse, noisy calibration still plans close to the model") {
  // what a first measurement looks like: 4 lengths x up to 6 group sizes (23 rows) with 3%
  // noise, and one micro-batch row. The shape terms it cannot support stay out
  // (`rows_per_hinge`); with hinges fitted from 3 rows the plans were 13% slower
  const dcpp::transformer_cost truth;
  // the sanitizer build (DCPP_TESTS_QUICK) fits seed 6 only, the one with the slowest plan
  const std::uint64_t first = dcpp_test::quick() ? 6 : 4;
  for (std::uint64_t seed = first; seed <= 6; ++seed) {
    CAPTURE(seed);
    dcpp::workload::rng r(seed);
    std::vector<dcpp::calibration_row> rows;
    for (const std::int64_t l : {2048, 8192, 32768, 131072})
      for (const std::int32_t cp : {1, 2, 4, 8, 16, 32})
        if (l / cp >= 128 && l / cp <= 65536)
          rows.push_back({l, cp, truth.cost(l, cp) * (1 + 0.03 * r.normal()), false});
    rows.push_back({0, 0, 0.005, true});
    const auto fitted = dcpp::calibrated_cost::fit(rows);
    CHECK(fitted.report().rms_relative < 0.05);
    for (const auto& c : dcpp_bench::generated_cases(true)) {
      if (c.name.find("/1024") != std::string::npos)
        continue;
      CAPTURE(c.name);
      const auto ideal = dcpp::planner<dcpp::transformer_cost, dcpp::balanced>(c.options, truth)
                             .make_plan(c.lengths);
      auto calibrated = dcpp::planner<dcpp::calibrated_cost, dcpp::balanced>(c.options, fitted)
                            .make_plan(c.lengths);
      dcpp::evaluate(calibrated, dcpp::make_problem(c.options, c.lengths), truth);
      // measured: at most 5.1% (seed 6, context_ext/128: the model's own plan there gained 1.5%
      // from balanced's idle-ranks step, which the noisy fit's plan, without idle ranks, does not
      // take; it was 3.6% before); on other workloads a noisy fit's plan is even faster
      CHECK(calibrated.metrics.estimated_step_time <= 1.06 * ideal.metrics.estimated_step_time);
    }
  }
}
