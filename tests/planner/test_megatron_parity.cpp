// Parity of megatron_greedy with the plans Megatron-LM's scheduler made for the shared reference
// workloads (../shared/workloads), and balanced against it. Skips (exit 77) without them.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../support.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "dcpp/io/batch_input.hpp"
#include "dcpp/io/plan_json.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"
#include "dcpp/planner/planner.hpp"

namespace fs = std::filesystem;

namespace {
fs::path workloads_dir() {
  const char* dir = std::getenv("DCPP_REFERENCE_WORKLOADS");
  return dir ? fs::path(dir) : fs::path();
}

struct reference {
  std::string name;
  dcpp::plan_options options;
  std::vector<std::int64_t> lengths;
  dcpp::plan plan;
  double efficiency_l2 = 0;
};

std::vector<reference> load_references() {
  std::vector<reference> out;
  for (const auto& e : fs::directory_iterator(workloads_dir())) {
    const auto path = e.path();
    if (path.extension() != ".json" || path.string().find("megatron_dcp_plan") != std::string::npos)
      continue;
    std::ifstream in(path);
    dcpp::batch_input batch = dcpp::read_batch(in, path.string());
    reference r;
    r.name = path.stem().string();
    r.options.world_size = batch.world_size.value();
    r.options.max_tokens_per_rank = batch.max_tokens_per_rank.value();
    r.options.min_cp = batch.min_cp.value();
    r.options.microbatch_multiple = batch.microbatch_multiple.value_or(1);
    r.lengths = std::move(batch.lengths);
    std::ifstream plan_in(path.parent_path() / (r.name + ".megatron_dcp_plan.json"));
    const std::string text{std::istreambuf_iterator<char>(plan_in),
                           std::istreambuf_iterator<char>()};
    r.plan = dcpp::read_plan_json(text, r.name);
    r.efficiency_l2 = nlohmann::json::parse(text).at("metrics").at("efficiency_l2").get<double>();
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

using group_key = std::tuple<std::int32_t, std::int32_t, std::vector<std::int32_t>>;
std::set<group_key> groups_of(const dcpp::plan_microbatch& mb) {
  std::set<group_key> out;
  for (const auto& g : mb.groups) {
    auto samples = g.samples;
    std::sort(samples.begin(), samples.end());
    out.emplace(g.first_rank, g.cp, samples);
  }
  return out;
}

std::map<std::int32_t, int> cp_histogram(const dcpp::plan& p) {
  std::map<std::int32_t, int> h;
  for (const auto& mb : p.microbatches)
    for (const auto& g : mb.groups)
      ++h[g.cp];
  return h;
}

// Megatron's own efficiency figure: sum L^2 / N over the step time under L^2/cp, which counts no
// micro-batch overhead (the sum of the micro-batches' times)
double efficiency_l2(const dcpp::plan& p) {
  double area = 0;
  for (const auto l : p.lengths)
    area += static_cast<double>(l) * static_cast<double>(l);
  double step = 0;
  for (const auto& mb : p.microbatches)
    step += mb.time;
  return area / p.world_size / step;
}
} // namespace

TEST_CASE("megatron parity: the same micro-batches as Megatron-LM's scheduler") {
  const auto refs = load_references();
  REQUIRE(refs.size() >= 7);
  for (const auto& r : refs) {
    CAPTURE(r.name);
    const dcpp::planner<dcpp::length_squared_cost, dcpp::megatron_greedy> planner(r.options);
    const auto ours = planner.make_plan(r.lengths);
    CHECK(ours.microbatches.size() == r.plan.microbatches.size());
    CHECK(cp_histogram(ours) == cp_histogram(r.plan));
    CHECK(efficiency_l2(ours) == doctest::Approx(r.efficiency_l2).epsilon(0.002));
    if (r.options.microbatch_multiple == 1) {
      // identical rounds, group for group (the original's micro-batch order is kept too)
      for (std::size_t m = 0; m < ours.microbatches.size() && m < r.plan.microbatches.size(); ++m)
        CHECK(groups_of(ours.microbatches[m]) == groups_of(r.plan.microbatches[m]));
    }
  }
}

TEST_CASE("megatron parity: balanced is at least as fast, within its micro-batch allowance") {
  for (const auto& r : load_references()) {
    CAPTURE(r.name);
    auto both = [&](const auto& estimator) {
      using E = std::decay_t<decltype(estimator)>;
      const auto m =
          dcpp::planner<E, dcpp::megatron_greedy>(r.options, estimator).make_plan(r.lengths);
      const auto b = dcpp::planner<E, dcpp::balanced>(r.options, estimator).make_plan(r.lengths);
      CHECK(b.metrics.estimated_step_time <= m.metrics.estimated_step_time * (1 + 1e-12));
      // every round pays the micro-batch overhead (length^2/cp: the default share of the
      // batch's work), so balanced adds at most its allowance of rounds, and only ones that pay
      const std::size_t k_min = static_cast<std::size_t>(b.metrics.min_microbatches);
      const std::size_t mult = static_cast<std::size_t>(r.options.microbatch_multiple);
      const auto divisor = static_cast<std::size_t>(dcpp::balanced_tuning{}.extra_rounds_divisor);
      const std::size_t extra =
          (std::max<std::size_t>(1, (k_min + divisor - 1) / divisor) + mult - 1) / mult * mult;
      CHECK(b.microbatches.size() <= std::max(m.microbatches.size(), k_min + extra));
    };
    both(dcpp::length_squared_cost{});
    both(dcpp::transformer_cost{});
  }
}

int main(int argc, char** argv) {
  if (workloads_dir().empty() || !fs::is_directory(workloads_dir())) {
    std::printf("skip: reference workloads not found (DCPP_REFERENCE_WORKLOADS=%s)\n",
                workloads_dir().string().c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
