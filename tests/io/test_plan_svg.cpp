// Tests for include/dcpp/io/plan_svg.hpp.
#include "../support.hpp"

#include "../helpers.hpp"

#include <string>

#include "dcpp/io/plan_svg.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
dcpp::plan sample_plan() {
  return dcpp::planner<>(dcpp_test::options(16, 4096)).make_plan(dcpp::workload::bimodal(150, 5));
}
} // namespace

TEST_CASE("plan_svg: one box per group, one column per micro-batch, idle hatching, closed tags") {
  const auto p = sample_plan();
  const std::string svg = dcpp::write_plan_svg(p, "t");
  std::size_t groups = 0;
  for (const auto& mb : p.microbatches)
    groups += mb.groups.size();
  CHECK(dcpp_test::occurrences(svg, "<title>micro-batch") == groups);
  CHECK(dcpp_test::occurrences(svg, "fill=\"url(#idle)\"/>") == p.microbatches.size());
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  // every rect is closed: self-closing, or followed by its </rect> before the next rect
  for (auto pos = svg.find("<rect"); pos != std::string::npos;) {
    const auto end = svg.find('>', pos);
    REQUIRE(end != std::string::npos);
    const auto next = svg.find("<rect", end);
    if (svg[end - 1] != '/') {
      const auto close = svg.find("</rect>", end);
      REQUIRE(close != std::string::npos);
      CHECK((next == std::string::npos || close < next));
    }
    pos = next;
  }
  CHECK(svg.find("efficiency") != std::string::npos);
}
