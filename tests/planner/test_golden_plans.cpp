// Golden plans: the hash of every plan the shipped packing policies make for the planner
// benchmark's workloads (generated, and the reference workloads of ../shared when present), under
// both group topologies, compared with tests/planner/golden_plans.txt. A refactoring that keeps
// plans keeps every line; a change that moves plans on purpose regenerates the file
// (DCPP_GOLDEN_WRITE=1 ./build/tests/golden_plans_tests) and says why in its commit.
#include "../support.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "planner_cases.hpp"

namespace fs = std::filesystem;

namespace {

using dcpp_bench::planner_case;

fs::path env_path(const char* name) {
  const char* v = std::getenv(name);
  return v ? fs::path(v) : fs::path();
}

//! The sanitizer build (DCPP_TESTS_QUICK) plans one seed per generator, the 65,536-sample
//! cases with balanced only (megatron_greedy takes 4 s on them optimised, uniform_cp and
//! static_cp most of a second), and the generated cases in the aligned topology only: balanced's
//! contiguous plans of them took 400 of its 560 s there. The reference workloads keep both.
using dcpp_test::quick;

//! Samples from which a run skips megatron_greedy in the contiguous topology: on 65,536 samples
//! and 1,024 ranks it takes 140-315 s there (it tries every CP size from 1 to 1,024 for every
//! sample; aligned, 11 sizes: 4 s), too long for a test.
constexpr std::size_t megatron_contiguous_limit = 10000;

template <class Packing, class Estimator>
std::string plan_key(const planner_case& c, const Estimator& estimator, dcpp::topology t) {
  dcpp::plan_options o = c.options;
  o.group_topology = t;
  dcpp::planner<Estimator, Packing> p(o, estimator, Packing{});
  if (const dcpp::status s = p.can_plan(c.lengths); !s)
    return "refused";
  return fmt::format("{:016x}", dcpp::plan_hash(p.make_plan(c.lengths)));
}

//! One line per (workload, estimator, topology, policy): "name estimator topology policy hash".
template <class Estimator>
void add_lines(std::map<std::string, std::string>& out, const std::vector<planner_case>& cases,
               const Estimator& estimator, const std::string& estimator_name,
               bool contiguous = true) {
  for (const auto& c : cases)
    for (const dcpp::topology t : {dcpp::topology::aligned, dcpp::topology::contiguous}) {
      if (t == dcpp::topology::contiguous && !contiguous)
        continue;
      const std::string prefix =
          fmt::format("{} {} {} ", c.name, estimator_name, dcpp::to_string(t));
      out[prefix + "balanced"] = plan_key<dcpp::balanced>(c, estimator, t);
      if (quick() && c.lengths.size() > 10000)
        continue;
      if (t == dcpp::topology::aligned || c.lengths.size() <= megatron_contiguous_limit)
        out[prefix + "megatron_greedy"] = plan_key<dcpp::megatron_greedy>(c, estimator, t);
      out[prefix + "uniform_cp"] = plan_key<dcpp::uniform_cp>(c, estimator, t);
      out[prefix + "static_cp"] = plan_key<dcpp::static_cp>(c, estimator, t);
    }
}

std::map<std::string, std::string> read_golden(const fs::path& path) {
  std::map<std::string, std::string> golden;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), fmt::format("cannot read {}", path.string()));
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#')
      continue;
    const auto cut = line.rfind(' ');
    REQUIRE_MESSAGE(cut != std::string::npos,
                    fmt::format("{}:{}: expected 'name estimator topology policy hash'",
                                path.string(), number));
    golden[line.substr(0, cut)] = line.substr(cut + 1);
  }
  return golden;
}

void write_golden(const fs::path& path, const std::map<std::string, std::string>& lines) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << "# plan_hash of every plan the shipped packing policies make for the planner "
           "benchmark's workloads\n"
           "# (tests/planner/test_golden_plans.cpp; regenerate only when plans change on "
           "purpose)\n";
    for (const auto& [key, hash] : lines)
      out << key << ' ' << hash << '\n';
    out.flush();
    REQUIRE_MESSAGE(out.good(), fmt::format("cannot write {}", tmp.string()));
  }
  fs::rename(tmp, path);
}

} // namespace

TEST_CASE("golden plans: every shipped policy plans the benchmark workloads as frozen") {
  const fs::path golden_path = env_path("DCPP_GOLDEN_PLANS");
  REQUIRE_MESSAGE(!golden_path.empty(), "DCPP_GOLDEN_PLANS names the golden file");
  const auto estimator = dcpp::transformer_cost::from_preset("llama3-8b@h100");
  REQUIRE(estimator);

  std::map<std::string, std::string> computed;
  // the quick build: one seed per generator (with the chunked construction its sanitized run
  // of every seed took 390 s)
  add_lines(computed, dcpp_bench::generated_cases(quick()), *estimator, "llama3-8b@h100", !quick());
  const auto refs = dcpp_bench::reference_cases(env_path("DCPP_REFERENCE_WORKLOADS"));
  add_lines(computed, refs, dcpp::length_squared_cost{}, "length2");
  add_lines(computed, refs, *estimator, "llama3-8b@h100");

  if (std::getenv("DCPP_GOLDEN_WRITE") != nullptr) {
    REQUIRE_MESSAGE((!refs.empty() && !quick()),
                    "write the golden file from a full run with the reference workloads");
    write_golden(golden_path, computed);
    MESSAGE(fmt::format("wrote {} plans to {}", computed.size(), golden_path.string()));
    return;
  }
  const auto golden = read_golden(golden_path);
  int compared = 0, changed = 0;
  for (const auto& [key, hash] : computed) {
    const auto it = golden.find(key);
    if (it == golden.end()) {
      FAIL_CHECK(fmt::format("no golden plan for '{}' (computed {})", key, hash));
      ++changed;
      continue;
    }
    ++compared;
    if (it->second != hash) {
      FAIL_CHECK(fmt::format("'{}': plan {} differs from the golden {}", key, hash, it->second));
      ++changed;
    }
  }
  // every golden line is planned again, except the reference workloads' when ../shared is absent
  // and, in the quick build, the seeds past the first, the large cases' policies other than
  // balanced and the generated cases' contiguous plans
  int not_run = 0;
  for (const auto& [key, hash] : golden)
    if (!computed.contains(key))
      ++not_run;
  if (!refs.empty() && !quick())
    CHECK_MESSAGE(not_run == 0, fmt::format("{} golden plans were not made again", not_run));
  MESSAGE(fmt::format("{} plans compared, {} differ, {} golden plans not made in this run",
                      compared, changed, not_run));
  // not vacuous: 414 with the reference workloads, 302 without (quick: 170 and 58)
  CHECK(compared >= (quick() ? (refs.empty() ? 50 : 100) : 250));
}
