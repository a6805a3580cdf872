// What the tests of balanced's parts share: a batch (problem, estimator, cost view) with or
// without a cost table, seeded random batches, and a check of an assignment's invariants and
// of the plan it gives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../../plan_checks.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/packing/balanced.hpp"
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

} // namespace dcpp_test::balanced_parts
