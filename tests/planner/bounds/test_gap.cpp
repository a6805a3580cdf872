// Tests for include/dcpp/planner/bounds/gap.hpp: the classes and runs of the gap term (what the
// chunked construction deals), against a count made here. The bound itself is tested against
// every plan of small batches in test_plan.cpp.
#include "../../support.hpp"
#include "../plan_checks.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "dcpp/planner/bounds/budget_lower_bound.hpp"
#include "dcpp/planner/bounds/gap.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/transformer_cost.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
namespace w = dcpp::workload;
using namespace dcpp_test::planning;

// the time of sample i on its size of least area (the least time among sizes of equal area)
template <class Estimator>
double own_time(const dcpp::problem& pr, const Estimator& e, std::size_t i) {
  double area = std::numeric_limits<double>::infinity();
  double time = area;
  for (const std::int32_t cp : pr.cp_sizes)
    if (cp >= pr.min_cp_of[i]) {
      const double t = dcpp::sample_cost(pr, e, i, cp);
      if (t * cp < area || (t * cp == area && t < time)) {
        area = t * cp;
        time = t;
      }
    }
  return time;
}
} // namespace

TEST_CASE("gap_classes: one class per smallest size of at least 2, its slowest samples in runs "
          "by own time") {
  const auto e = *dcpp::transformer_cost::from_preset("llama3-8b@h100");
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    CAPTURE(seed);
    dcpp::plan_options o = options_for(seed == 3 ? 40 : 96, 4096);
    if (seed == 3)
      o.group_topology = dcpp::topology::contiguous;
    auto lengths = w::bimodal(700, seed);
    const std::int64_t cap = dcpp::max_plannable_length(o);
    for (auto& l : lengths)
      l = std::min(l, cap);
    auto pr = dcpp::make_problem(o, lengths);
    if (seed == 2)
      dcpp::tabulate_costs(pr, e);
    const auto classes = dcpp::detail::gap_classes(pr, e, dcpp::min_microbatches(pr),
                                                   dcpp::microbatch_overhead(pr, e));
    std::set<std::int32_t> smallest; // made here
    for (const std::int32_t c : pr.min_cp_of)
      if (c >= 2)
        smallest.insert(c);
    REQUIRE(classes.size() == smallest.size());
    auto expected = smallest.begin();
    for (const auto& c : classes) {
      CAPTURE(c.smallest);
      CHECK(c.smallest == *expected++);
      if (c.bound == 0) { // nothing to say: fewer than two members
        CHECK(c.runs.empty());
        CHECK(std::count(pr.min_cp_of.begin(), pr.min_cp_of.end(), c.smallest) < 2);
        continue;
      }
      CHECK(c.bound >= dcpp::lower_bound(pr, e) * (1 - 1e-12));
      CHECK(c.bound <= dcpp::budget_lower_bound(pr, e) * (1 + 1e-12));
      // the members: of the class, each once, at most 128, the slowest of the class
      std::vector<std::int32_t> members;
      double last = std::numeric_limits<double>::infinity(); // own times fall run after run
      for (const auto& run : c.runs) {
        CHECK(!run.empty());
        for (const std::int32_t s : run) {
          CHECK(pr.min_cp_of[static_cast<std::size_t>(s)] == c.smallest);
          const double t = own_time(pr, e, static_cast<std::size_t>(s));
          CHECK(t <= last);
          last = t;
          members.push_back(s);
        }
      }
      CHECK(members.size() <= 128);
      CHECK(std::set<std::int32_t>(members.begin(), members.end()).size() == members.size());
      std::size_t in_class = 0;
      double slowest_left_out = 0; // of the class, in no run
      for (std::size_t i = 0; i < pr.size(); ++i)
        if (pr.min_cp_of[i] == c.smallest) {
          ++in_class;
          if (std::find(members.begin(), members.end(), static_cast<std::int32_t>(i)) ==
              members.end())
            slowest_left_out = std::max(slowest_left_out, own_time(pr, e, i));
        }
      // a member in no run is best on a faster size; but no run skips a slower sample
      if (members.size() == std::min<std::size_t>(in_class, 128) && !members.empty())
        CHECK(slowest_left_out <= last);
    }
  }
}

TEST_CASE("gap_classes: nothing without a micro-batch overhead or past 64 sizes") {
  const auto e = *dcpp::transformer_cost::from_preset("llama3-8b@h100");
  dcpp::plan_options o = options_for(32, 4096);
  const auto lengths = w::bimodal(300, 4);
  const auto pr = dcpp::make_problem(o, lengths);
  CHECK(!dcpp::detail::gap_classes(pr, e, dcpp::min_microbatches(pr), 0.005).empty());
  CHECK(dcpp::detail::gap_classes(pr, e, dcpp::min_microbatches(pr), 0.0).empty());
  o.world_size = 65;
  o.group_topology = dcpp::topology::contiguous;
  const auto wide = dcpp::make_problem(o, lengths);
  REQUIRE(wide.cp_sizes.size() > 64);
  CHECK(dcpp::detail::gap_classes(wide, e, dcpp::min_microbatches(wide), 0.005).empty());
}
