// What the tests of balanced's parts share: a batch (problem, estimator, cost view) with or
// without a cost table, seeded random batches, and a check of an assignment's invariants and
// of the plan it gives.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../../plan_checks.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/packing/balanced.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/planner/transformer_cost.hpp"
#include "dcpp/workload/generators.hpp"

namespace dcpp_test::balanced_parts {
using namespace dcpp_test::planning;
using estimator = dcpp::transformer_cost;
using costs_view = dcpp::detail::cost_rows<estimator>;
using state = dcpp::detail::assignment<estimator>;

//! How a batch's costs are read: no rows (a problem `tabulate_costs` never saw), rows by length
//! without a table (over its entry limit), or rows and the table.
enum class tabulation { none, rows_only, table };

//! The three ways in turn, by seed.
inline tabulation tabulation_for(std::uint64_t seed) {
  return static_cast<tabulation>(seed % 3);
}

//! A problem, tabulated or not, and the view over it (the view refers to both, so a batch
//! neither copies nor moves).
struct batch {
  batch(const dcpp::plan_options& o, const std::vector<std::int64_t>& lengths, tabulation t,
        estimator model = {})
      : e(model), pr(make(o, lengths, t, e)), costs(pr, e) {}
  batch(const batch&) = delete;
  batch& operator=(const batch&) = delete;

  estimator e{};
  dcpp::problem pr;
  costs_view costs;

private:
  static dcpp::problem make(const dcpp::plan_options& o, const std::vector<std::int64_t>& lengths,
                            tabulation t, const estimator& model) {
    dcpp::problem p = dcpp::make_problem(o, lengths);
    if (t != tabulation::none)
      dcpp::tabulate_costs(p, model, t == tabulation::table ? std::size_t{1} << 17 : 0);
    return p;
  }
};

//! Options and lengths of a seeded random batch (awkward worlds, budgets, padding, topologies,
//! multiples and CP caps; lengths from 1 to the plannable limit).
struct random_case {
  dcpp::plan_options options;
  std::vector<std::int64_t> lengths;
};
inline random_case make_random_case(std::uint64_t seed) {
  dcpp::workload::rng r(seed);
  random_case c;
  c.options = random_options(r);
  c.lengths = random_lengths(r, c.options);
  return c;
}

//! The assignment's invariants, and those of its plan checked independently.
inline void check_state(const state& a, const batch& b) {
  CHECK(a.consistent());
  dcpp::plan p = a.to_plan("test");
  dcpp::evaluate(p, b.pr, b.e);
  check_invariants(p, b.pr.options);
  CHECK(p.metrics.estimated_step_time == doctest::Approx(a.step_time()).epsilon(1e-12));
}

//! NVLink within 8 GPUs, InfiniBand beyond, 9x slower (the benchmark's two-tier cluster): the
//! ring's exchange hides behind compute within a node, so CP sizes tie in area there.
inline estimator two_tier() {
  dcpp::device_spec d = dcpp::device_presets[0];
  d.network.intra_node.bytes_per_second = 450e9;
  d.network.inter_node.bytes_per_second = 50e9;
  return estimator(dcpp::model_presets[0], d);
}

//! A batch on `world` ranks with `tokens` per rank: `samples` lengths drawn log-normally about
//! `median` (spread `sigma`), from 33 tokens to half the plannable length.
struct lognormal_batch {
  std::int32_t world;
  std::size_t samples;
  std::int64_t tokens;
  double median;
  double sigma;
};
inline std::vector<std::int64_t>
lognormal_lengths(const lognormal_batch& lb, const dcpp::plan_options& o, std::uint64_t seed) {
  dcpp::workload::rng r(seed);
  std::vector<std::int64_t> lengths(lb.samples);
  for (auto& l : lengths)
    l = dcpp::workload::clamp_length(std::exp(std::log(lb.median) + lb.sigma * r.normal()), 33,
                                     dcpp::max_plannable_length(o) / 2);
  return lengths;
}

//! Balanced plans `lb` (seed `seed`) the same with and without its second thread
//! (`parallel_levelled`); `check(lengths)` first checks what the batch must be.
template <class Check>
void check_same_without_thread(const lognormal_batch& lb, std::uint64_t seed, const Check& check) {
  CAPTURE(seed);
  CAPTURE(lb.world);
  dcpp::plan_options o;
  o.world_size = lb.world;
  o.max_tokens_per_rank = lb.tokens;
  const std::vector<std::int64_t> lengths = lognormal_lengths(lb, o, seed);
  check(lengths);
  dcpp::balanced without;
  without.tuning.parallel_levelled = false;
  const estimator cost = two_tier();
  const dcpp::plan p = dcpp::planner(o, cost, dcpp::balanced{}).make_plan(lengths);
  const dcpp::plan q = dcpp::planner(o, cost, without).make_plan(lengths);
  CHECK(p.microbatches == q.microbatches);
  CHECK(p.metrics.estimated_step_time == q.metrics.estimated_step_time);
}

} // namespace dcpp_test::balanced_parts
