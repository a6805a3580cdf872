// Tests for include/dcpp/io/plan_table.hpp.
#include "../support.hpp"

#include "../helpers.hpp"

#include <string>

#include "dcpp/io/plan_table.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
dcpp::plan sample_plan() {
  return dcpp::planner<>(dcpp_test::options(16, 4096)).make_plan(dcpp::workload::bimodal(150, 5));
}
} // namespace

TEST_CASE("plan_table: one row per micro-batch and the metrics") {
  const auto p = sample_plan();
  const std::string table = fmt::format("{}", p);
  CHECK(dcpp_test::occurrences(table, "\n") == 3 + p.microbatches.size());
  CHECK(table.find("efficiency") != std::string::npos);
  CHECK(table.find(fmt::format("{} micro-batch", p.microbatches.size())) != std::string::npos);
}

TEST_CASE("plan_table: the CP histogram lists sizes largest first") {
  dcpp::plan_microbatch mb;
  mb.groups = {{0, 1, {0}, 0, 0.0}, {1, 1, {1}, 0, 0.0}, {2, 2, {2}, 0, 0.0}, {4, 4, {3}, 0, 0.0}};
  CHECK(dcpp::cp_histogram(mb) == "cp4x1 cp2x1 cp1x2");
  CHECK(dcpp::cp_histogram(dcpp::plan_microbatch{}).empty());
}
