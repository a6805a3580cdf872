// Tests for include/dcpp/io/plan_svg.hpp.
#include "../support.hpp"

#include "../helpers.hpp"

#include <cstdint>
#include <string>
#include <vector>

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

TEST_CASE("plan_svg: a title of any bytes is well-formed XML") {
  // a file name with & or < (dcpp-plan's title) made the picture malformed XML
  const auto p = sample_plan();
  const std::string svg = dcpp::write_plan_svg(p, "R&D <\"1\"> caf\xC3\xA9\x01\xFF!");
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(svg.find(">R&amp;D &lt;&quot;1&quot;&gt; caf\xC3\xA9" + fffd + fffd + "!</text>") !=
        std::string::npos);
  // no UTF-8 a parser would refuse: an overlong form, a surrogate, a lead byte cut short
  CHECK(dcpp::detail::xml_text("\xC0\xAF") == fffd + fffd);
  CHECK(dcpp::detail::xml_text("\xED\xA0\x80") == fffd + fffd + fffd);
  CHECK(dcpp::detail::xml_text("a\xE2\x82") == "a" + fffd + fffd);
  CHECK(dcpp::detail::xml_text("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);  // > U+10FFFF
  CHECK(dcpp::detail::xml_text("\xF0\x9F\x99\x82\t\n") == "\xF0\x9F\x99\x82\t\n"); // kept
  // U+FFFE and U+FFFF are no XML characters (a workload named with them made a broken picture);
  // U+FFFD and U+FFFC next to them are characters
  CHECK(dcpp::detail::xml_text("a\xEF\xBF\xBE"
                               "b\xEF\xBF\xBF") ==
        "a" + fffd + fffd + fffd + "b" + fffd + fffd + fffd);
  CHECK(dcpp::detail::xml_text("\xEF\xBF\xBD\xEF\xBF\xBC") == "\xEF\xBF\xBD\xEF\xBF\xBC");
}

TEST_CASE("plan_svg: the largest worlds draw at most 16,384 px of ranks") {
  // 2 samples on 2^20 contiguous ranks: a plot of 2^20 px with 75,000 rank labels before
  dcpp::plan_options o = dcpp_test::options(1 << 20, 8192);
  o.group_topology = dcpp::topology::contiguous;
  const std::vector<std::int64_t> two{100000, 5000};
  const std::string svg = dcpp::write_plan_svg(dcpp::planner<>(o).make_plan(two));
  CHECK(svg.find("height=\"16504\"") != std::string::npos); // 70 above, 16,384, 50 below
  CHECK(svg.size() < 200000);
  // up to 16,384 ranks, a pixel per rank or more, as before
  const auto small = dcpp::planner<>(dcpp_test::options(1024, 8192)).make_plan(two);
  CHECK(dcpp::write_plan_svg(small).find("height=\"1144\"") != std::string::npos);
}
