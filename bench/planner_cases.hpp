// The planner benchmark's workloads, shared with the golden-plan test (tests/planner/
// test_golden_plans.cpp): seeded generated batches and the reference workloads of ../shared.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dcpp/dcpp.hpp"
#include "dcpp/workload/generators.hpp"

namespace dcpp_bench {

struct planner_case {
  std::string name;
  std::vector<std::int64_t> lengths;
  dcpp::plan_options options;
};

inline dcpp::plan_options make_options(std::int32_t world, std::int64_t budget,
                                       std::int32_t multiple = 1) {
  dcpp::plan_options o;
  o.world_size = world;
  o.max_tokens_per_rank = budget;
  o.microbatch_multiple = multiple;
  return o;
}

//! Seeded generated workloads: every generator at one to three seeds (`quick`: one), and two
//! 65,536-sample batches on 1,024 ranks.
inline std::vector<planner_case> generated_cases(bool quick) {
  namespace w = dcpp::workload;
  std::vector<planner_case> cases;
  auto add = [&](std::string name, std::vector<std::int64_t> lengths, dcpp::plan_options o) {
    cases.push_back({std::move(name), std::move(lengths), o});
  };
  for (std::uint64_t seed = 1; seed <= (quick ? 1U : 3U); ++seed) {
    const std::string s = fmt::format("/s{}", seed);
    add("sft_lognormal/8" + s, w::sft_lognormal(256, seed), make_options(8, 8192));
    add("sft_lognormal" + s, w::sft_lognormal(4096, seed), make_options(64, 8192));
    add("long_tail" + s, w::long_tail(2048, seed), make_options(64, 8192));
    add("long_tail/24" + s, w::long_tail(768, seed, 0.025, 98304), make_options(24, 8192));
    add("long_tail/48" + s, w::long_tail(1536, seed), make_options(48, 8192));
    add("pareto" + s, w::pareto(1024, seed), make_options(64, 4096));
    add("bimodal" + s, w::bimodal(512, seed), make_options(32, 4096));
    add("bimodal/96" + s, w::bimodal(1536, seed), make_options(96, 4096));
    add("rl_rollouts" + s, w::rl_rollouts(512, seed), make_options(32, 8192));
    add("rl_rollouts/vpp4" + s, w::rl_rollouts(512, seed), make_options(32, 8192, 4));
    add("short_only" + s, w::short_only(2048, seed), make_options(32, 4096));
  }
  // context extension: 2% long documents of up to a quarter of the world's tokens per
  // micro-batch, the rest short
  for (const std::int32_t world : {64, 128, 256})
    add(fmt::format("context_ext/{}", world),
        w::context_extension(static_cast<std::size_t>(world) * 8, 11,
                             std::int64_t{world} * 16384 / 4),
        make_options(world, 16384));
  add("sft_lognormal/1024", w::sft_lognormal(65536, 7), make_options(1024, 8192));
  add("long_tail/1024", w::long_tail(65536, 7), make_options(1024, 8192));
  return cases;
}

//! The reference workloads in `dir` (every *.json that is not a *_plan*.json, by name); none when
//! the folder does not exist.
inline std::vector<planner_case> reference_cases(const std::filesystem::path& dir) {
  std::vector<planner_case> cases;
  if (!std::filesystem::is_directory(dir))
    return cases;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json" && e.path().string().find("_plan") == std::string::npos)
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f);
    dcpp::batch_input batch = dcpp::read_batch(in, f.string());
    dcpp::plan_options o = make_options(batch.world_size.value(), batch.max_tokens_per_rank.value(),
                                        batch.microbatch_multiple.value_or(1));
    o.min_cp = batch.min_cp.value_or(1);
    cases.push_back({f.stem().string(), std::move(batch.lengths), o});
  }
  return cases;
}

} // namespace dcpp_bench
