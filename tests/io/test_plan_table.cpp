// Tests for include/dcpp/io/plan_table.hpp.
#include "../support.hpp"

#include <string>

#include "dcpp/io/plan_table.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1))
    ++n;
  return n;
}
dcpp::plan sample_plan() {
  dcpp::plan_options o;
  o.world_size = 16;
  o.max_tokens_per_rank = 4096;
  return dcpp::planner<>(o).make_plan(dcpp::workload::bimodal(150, 5));
}
} // namespace

TEST_CASE("plan_table: one row per micro-batch and the metrics") {
  const auto p = sample_plan();
  const std::string table = fmt::format("{}", p);
  CHECK(count(table, "\n") == 3 + p.microbatches.size());
  CHECK(table.find("efficiency") != std::string::npos);
  CHECK(table.find(fmt::format("{} micro-batch", p.microbatches.size())) != std::string::npos);
}

TEST_CASE("plan_table: the CP histogram lists sizes largest first") {
  dcpp::plan_microbatch mb;
  mb.groups = {{0, 1, {0}, 0, 0.0}, {1, 1, {1}, 0, 0.0}, {2, 2, {2}, 0, 0.0}, {4, 4, {3}, 0, 0.0}};
  CHECK(dcpp::cp_histogram(mb) == "cp4x1 cp2x1 cp1x2");
  CHECK(dcpp::cp_histogram(dcpp::plan_microbatch{}).empty());
}
