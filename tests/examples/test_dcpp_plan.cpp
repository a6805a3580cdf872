// Tests for examples/dcpp_plan.cpp: the CLI's outputs, determinism and one-line errors that
// leave nothing written.
#include "../support.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "dcpp/io/plan_json.hpp"
#include "dcpp/planner/validate.hpp"

namespace fs = std::filesystem;

namespace {
struct result {
  int status = -1;
  std::string out; // stdout
  std::string err; // stderr
};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, name, " is not set (run through meson test)");
  return v;
}

//! A scratch folder for this process, removed at exit.
struct scratch_dir {
  fs::path path = fs::temp_directory_path() / ("dcpp_cli_test_" + std::to_string(::getpid()));
  scratch_dir() { fs::create_directories(path); }
  ~scratch_dir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

fs::path scratch() {
  static const scratch_dir dir;
  return dir.path;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

result run(const std::string& args, const std::string& stdin_text = "") {
  const fs::path out = scratch() / "stdout.txt";
  const fs::path err = scratch() / "stderr.txt";
  std::string command = env("DCPP_PLAN") + " " + args + " >" + out.string() + " 2>" + err.string();
  if (!stdin_text.empty()) {
    const fs::path in = scratch() / "stdin.txt";
    std::ofstream(in) << stdin_text;
    command += " <" + in.string();
  }
  const int raw = std::system(command.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
}

fs::path write(const std::string& name, const std::string& text) {
  const fs::path p = scratch() / name;
  std::ofstream(p) << text;
  return p;
}

// the JSON with the one timing field zeroed
std::string without_timing(const std::string& json) {
  const auto p = dcpp::read_plan_json(json);
  auto j = nlohmann::json::parse(json);
  j["metrics"]["plan_seconds"] = 0;
  (void)p;
  return j.dump();
}

void expect_error(const std::string& args, const std::string& needle) {
  const fs::path json = scratch() / "should_not_exist.json";
  const fs::path svg = scratch() / "should_not_exist.svg";
  fs::remove(json);
  fs::remove(svg);
  const auto r = run(args + " --json " + json.string() + " --svg " + svg.string());
  CAPTURE(args);
  CAPTURE(r.err);
  CHECK(r.status == 1);
  CHECK(r.err.rfind("dcpp-plan: error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(needle) != std::string::npos);
  CHECK_FALSE(fs::exists(json));
  CHECK_FALSE(fs::exists(svg));
}
} // namespace

TEST_CASE("dcpp-plan: the demo workload gives a table, a valid plan file and a picture") {
  const fs::path json = scratch() / "demo.json";
  const fs::path svg = scratch() / "demo.svg";
  const auto r =
      run(env("DCPP_DATA") +
          "/sft_long_tail.txt --world-size 32 --max-tokens-per-rank 8192 --compare --json " +
          json.string() + " --svg " + svg.string());
  CHECK(r.status == 0);
  CHECK(r.out.find("efficiency") != std::string::npos);
  for (const char* policy : {"balanced", "megatron_greedy", "uniform_cp", "static_cp"})
    CHECK(r.out.find(policy) != std::string::npos);
  const auto p = dcpp::read_plan_json(slurp(json));
  dcpp::plan_options o;
  o.world_size = 32;
  o.max_tokens_per_rank = 8192;
  CHECK(dcpp::validate(p, o).ok());
  CHECK(p.metrics.plan_seconds > 0);
  CHECK(slurp(svg).find("</svg>") != std::string::npos);
}

TEST_CASE("dcpp-plan: says when the token budget or whole groups cap the efficiency any plan can "
          "reach") {
  // 3 ranks, groups of at most 2, M = 100: the 200-token sample holds a round of its own whose
  // third rank takes at most 100 tokens of the 10-token samples (budget_lower_bound's case in
  // tests/planner/test_plan.cpp): bound 20000 + 19000 / 3, ceiling 20000 / 26333.3 = 0.7595
  std::string text = "200\n";
  for (int i = 0; i < 200; ++i)
    text += "10\n";
  const auto capped = run("- --world-size 3 --max-tokens-per-rank 100 --topology contiguous "
                          "--max-cp 2 --estimator length2 --microbatch-overhead 0",
                          text);
  CAPTURE(capped.err);
  CHECK(capped.status == 0);
  CHECK(capped.out.find("the budget-aware lower bound is 26333.3: no plan can exceed "
                        "efficiency 0.7595") != std::string::npos);
  // 30, 20 and 10 tokens on 3 ranks: no plan spreads their 1400 evenly (each sample runs on one
  // group, and a group of 2 takes ranks 0 and 1): the best is 30 on 2 ranks beside 20 and 10 on
  // the third, 500 (plus one micro-batch's overhead, 1% of the mean: 4.67), and the line says so
  const auto uneven =
      run("- --world-size 3 --max-tokens-per-rank 100 --estimator length2", "10\n20\n30\n");
  CHECK(uneven.status == 0);
  CHECK(uneven.out.find("the budget-aware lower bound is 504.667: no plan can exceed efficiency "
                        "0.9339") != std::string::npos);
  // where the samples spread evenly the line is absent
  const auto even =
      run("- --world-size 2 --max-tokens-per-rank 100 --estimator length2", "10\n20\n20\n10\n");
  CHECK(even.status == 0);
  CHECK(even.out.find("budget-aware lower bound") == std::string::npos);
}

TEST_CASE("dcpp-plan: same inputs, same bytes, whatever the flag order") {
  const fs::path in = write("mix.txt", "# mix\n100\n60000\n3000\n5000\n12000\n800\n800\n31000\n");
  const fs::path a = scratch() / "a.json";
  const fs::path b = scratch() / "b.json";
  REQUIRE(run(in.string() +
              " --world-size 16 --max-tokens-per-rank 4096 --policy balanced --json " + a.string())
              .status == 0);
  REQUIRE(run("--json " + b.string() + " --policy balanced --max-tokens-per-rank 4096 " +
              in.string() + " --world-size 16")
              .status == 0);
  CHECK(without_timing(slurp(a)) == without_timing(slurp(b)));
}

TEST_CASE("dcpp-plan: JSON workloads, stdin, estimators and topologies") {
  const fs::path wl =
      write("w.json", R"({"name": "tiny", "seqlens": [4000, 300, 20000, 9000], "total_gpus": 8,
                                         "max_seq_len_per_rank": 4096, "min_cp_size": 1})");
  auto r = run(wl.string() + " --quiet");
  CHECK(r.status == 0);
  CHECK(r.out.find("input tiny: 4 samples") != std::string::npos);
  r = run("- --world-size 2 --max-tokens-per-rank 512", "100\n200\n# end\n");
  CHECK(r.status == 0);
  CHECK(r.out.find("2 samples") != std::string::npos);
  r = run(wl.string() + " --estimator length2 --policy megatron_greedy --quiet");
  CHECK(r.status == 0);
  CHECK(r.out.find("megatron_greedy plan") != std::string::npos);
  const fs::path cal =
      write("cal.csv", "length,cp,seconds\n1000,1,0.01\n2000,1,0.021\n4000,1,0.045\n"
                       "8000,2,0.05\n16000,2,0.11\n16000,4,0.06\n32000,4,0.13\n"
                       "32000,8,0.08\n64000,8,0.2\n");
  r = run(wl.string() + " --estimator calibrated:" + cal.string() + " --quiet");
  CHECK(r.status == 0);
  CHECK(r.out.find("calibrated: ") != std::string::npos);
  CHECK(r.out.find("coefficients from 9 rows (8 GPUs per node); relative residual rms ") !=
        std::string::npos);
  r = run(wl.string() + " --topology contiguous --world-size 6 --quiet");
  CHECK(r.status == 0);
  r = run(wl.string() + " --policy static_cp --static-cp 8 --quiet");
  CHECK(r.status == 0);
}

TEST_CASE("dcpp-plan: bad input is one line, names the problem, and writes nothing") {
  expect_error(write("empty.txt", "# nothing here\n").string(), "no sample lengths");
  expect_error(write("word.txt", "100\n200\nten\n").string(),
               "word.txt:3: 'ten' is not an integer length");
  expect_error(write("zero.txt", "100\n0\n").string(), "zero.txt:2: length = 0 must be positive");
  const fs::path ok = write("ok.txt", "100\n70000\n");
  expect_error(ok.string() + " --world-size 8 --max-tokens-per-rank 4096",
               "sample 1: length = 70000 exceeds the largest plannable length 32768");
  expect_error(ok.string() + " --world-size 6 --min-cp 4 --max-tokens-per-rank 65536",
               "world_size = 6 is not a multiple of min_cp = 4");
  expect_error(ok.string() + " --max-tokens-per-rank 1", "below the padding unit");
  expect_error(ok.string() + " --world-size 32 --estimator gpt9", "--estimator 'gpt9' is unknown");
  expect_error((scratch() / "missing.txt").string(), "input: cannot open");
  expect_error(ok.string() + " --world-size 32 --policy static_cp --static-cp 2", "static cp = 2");
}

TEST_CASE("dcpp-plan: the network and the micro-batch overhead are options, and the JSON records "
          "them") {
  const fs::path wl = write("long.txt", "131072\n65536\n40000\n9000\n3000\n3000\n500\n");
  const fs::path json = scratch() / "network.json";
  auto r = run(wl.string() + " --world-size 32 --max-tokens-per-rank 8192 --quiet --json " +
               json.string());
  CAPTURE(r.err);
  REQUIRE(r.status == 0);
  auto p = dcpp::read_plan_json(slurp(json));
  REQUIRE(p.network.has_value());
  CHECK(p.network->gpus_per_node == 8);
  CHECK(p.network->intra_node.bytes_per_second == 150e9);
  CHECK(p.network->inter_node.bytes_per_second == 40e9);
  CHECK(p.metrics.microbatch_overhead == 5e-3);
  const double two_tier_step = p.metrics.estimated_step_time;
  // nodes of 32 GPUs and a faster fabric: every group is inside a node, the plan is faster
  r = run(wl.string() +
          " --world-size 32 --max-tokens-per-rank 8192 --quiet --gpus-per-node 32 "
          "--intra-node-bandwidth 300 --inter-node-bandwidth 100 "
          "--microbatch-overhead 0.002 --json " +
          json.string());
  REQUIRE(r.status == 0);
  p = dcpp::read_plan_json(slurp(json));
  CHECK(p.network->gpus_per_node == 32);
  CHECK(p.network->intra_node.bytes_per_second == 300e9);
  CHECK(p.network->inter_node.bytes_per_second == 100e9);
  CHECK(p.metrics.microbatch_overhead == 0.002);
  CHECK(p.metrics.estimated_step_time < two_tier_step);
  CHECK(slurp(json).find("\"microbatch_overhead\":0.002") != std::string::npos);
  // length^2/cp has no network: the JSON says so, and the overhead is the batch's 1%
  r = run(wl.string() +
          " --world-size 32 --max-tokens-per-rank 8192 --quiet --estimator "
          "length2 --json " +
          json.string());
  REQUIRE(r.status == 0);
  p = dcpp::read_plan_json(slurp(json));
  CHECK_FALSE(p.network.has_value());
  CHECK(slurp(json).find("\"network\": null") != std::string::npos);
  CHECK(p.metrics.microbatch_overhead > 0);
  // a calibration with micro-batch rows prices the micro-batch itself
  const fs::path cal =
      write("cal_mb.csv", "length,cp,seconds\n1000,1,0.01\n2000,1,0.021\n4000,1,0.045\n"
                          "8000,2,0.05\n16000,2,0.11\n16000,4,0.06\n32000,4,0.13\n"
                          "32000,8,0.08\n64000,8,0.2\nmicrobatch,0.003\nmicrobatch,0.005\n");
  r = run(wl.string() +
          " --world-size 32 --max-tokens-per-rank 8192 --quiet --estimator "
          "calibrated:" +
          cal.string() + " --json " + json.string());
  CAPTURE(r.err);
  REQUIRE(r.status == 0);
  p = dcpp::read_plan_json(slurp(json));
  // fitted in relative terms, like every row: m minimises sum (m / s_i - 1)^2, so
  // m = sum(1/s_i) / sum(1/s_i^2) = 0.0035294 for 3 and 5 ms
  CHECK(p.metrics.microbatch_overhead ==
        doctest::Approx((1 / 0.003 + 1 / 0.005) / (1 / 0.003 / 0.003 + 1 / 0.005 / 0.005)));
  REQUIRE(p.network.has_value());
  CHECK(p.network->gpus_per_node == 8);
  CHECK(slurp(json).find("\"intra_node\": null") == std::string::npos); // dump() has no spaces
  CHECK(slurp(json).find("\"intra_node\":null") != std::string::npos);
}

TEST_CASE("dcpp-plan: the megatron topology and estimator: Megatron's groups, every rank busy") {
  // 24 ranks: no group of 16 (Megatron creates none), no idle rank in any micro-batch, and the
  // estimator prices the ring on the network it is given
  const fs::path in = write("m24.txt", "40000\n300\n500\n20000\n900\n700\n6000\n150\n");
  const fs::path json = scratch() / "m24.json";
  const auto r = run(in.string() +
                     " --world-size 24 --max-tokens-per-rank 4096 --topology "
                     "megatron --estimator megatron --gpus-per-node 4 --quiet "
                     "--json " +
                     json.string());
  CAPTURE(r.err);
  REQUIRE(r.status == 0);
  const dcpp::plan p = dcpp::read_plan_json(slurp(json));
  for (const auto& mb : p.microbatches) {
    std::int32_t covered = 0;
    for (const auto& g : mb.groups) {
      CHECK(g.cp != 16);
      covered += g.cp;
    }
    CHECK(covered == 24);
  }
  CHECK(p.network.has_value());
  CHECK(p.network->gpus_per_node == 4);
  CHECK(slurp(json).find("\"topology\":\"megatron\"") != std::string::npos);
  expect_error(in.string() + " --world-size 24 --topology megatron --min-cp 3",
               "min_cp = 3 must be a power of two or world_size = 24 in the megatron topology");
  expect_error(in.string() + " --world-size 24 --topology megatron --microbatch-multiple 16",
               "the batch holds 8 samples, fewer than microbatch_multiple = 16");
}

TEST_CASE("dcpp-plan: numbers are decimal: a leading zero is no octal, a 0x prefix is refused") {
  const fs::path in = write("decimal.txt", "100\n7000\n300\n010\n");
  const fs::path json = scratch() / "decimal.json";
  // CLI11 alone read 016 as octal 14 and 0100000 as 32768
  const auto r = run(in.string() +
                     " --world-size 016 --max-tokens-per-rank 0100000 --quiet "
                     "--json " +
                     json.string());
  CAPTURE(r.err);
  REQUIRE(r.status == 0);
  const dcpp::plan p = dcpp::read_plan_json(slurp(json));
  CHECK(p.world_size == 16);
  CHECK(p.max_tokens_per_rank == 100000);
  CHECK(p.lengths.back() == 10); // the lengths file reads 010 as 10 too
  for (const std::string bad : {"0x10", "1e3", "16.0", "--", "+"}) {
    const auto e = run(in.string() + " --world-size=" + bad);
    CAPTURE(bad);
    CAPTURE(e.err);
    CHECK(e.status == 105);
    CHECK(e.err.find("'" + bad + "' is not a decimal integer") != std::string::npos);
  }
}

TEST_CASE("dcpp-plan: an integer past its option's type names the value and the range") {
  const fs::path in = write("range.txt", "100\n200\n");
  // CLI11 alone said "Could not convert: --world-size = 2147483648"
  for (const auto& [flag, value, range] :
       {std::tuple<std::string, std::string, std::string>{"--world-size", "2147483648",
                                                          "-2147483648 to 2147483647"},
        {"--world-size", "-00002147483649", "-2147483648 to 2147483647"},
        {"--max-tokens-per-rank", "99999999999999999999",
         "-9223372036854775808 to 9223372036854775807"},
        {"--min-cp", "4294967296", "-2147483648 to 2147483647"}}) {
    const auto r = run(in.string() + " " + flag + " " + value);
    CAPTURE(r.err);
    CHECK(r.status == 105);
    CHECK(r.err.find(flag + ": " + value + " is out of range: the limit is " + range) !=
          std::string::npos);
  }
  // within the type, the option's own limit names itself
  const auto r = run(in.string() + " --world-size 2147483647");
  CHECK(r.status == 1);
  CHECK(r.err.find("world_size = 2147483647") != std::string::npos);
}

TEST_CASE("dcpp-plan: --static-cp without the static policy is refused, not ignored") {
  const fs::path in = write("static.txt", "100\n200\n");
  auto r = run(in.string() + " --world-size 8 --static-cp 4");
  CHECK(r.status == 1);
  CHECK(r.err == "dcpp-plan: error: --static-cp 4 applies to --policy static_cp only; the policy "
                 "is balanced (add --policy static_cp, or drop --static-cp)\n");
  r = run(in.string() + " --world-size 8 --static-cp 4 --policy static_cp --quiet");
  CHECK(r.status == 0);
  r = run(in.string() + " --world-size 8 --static-cp 4 --compare --quiet");
  CHECK(r.status == 0);
}

TEST_CASE("dcpp-plan: the calibration example of docs/cli.md plans") {
  const std::string doc = slurp(fs::path(env("DCPP_DATA")) / ".." / ".." / "docs" / "cli.md");
  const std::string intro = "Write them as CSV:\n\n```\n";
  const std::size_t at = doc.find(intro);
  REQUIRE(at != std::string::npos);
  const std::size_t begin = at + intro.size();
  const std::string csv = doc.substr(begin, doc.find("```", begin) - begin);
  const fs::path cal = write("doc_calibration.csv", csv);
  const fs::path in = write("doc_batch.txt", "1000\n4096\n65536\n200000\n");
  const auto r =
      run(in.string() + " --world-size 64 --estimator calibrated:" + cal.string() + " --quiet");
  CAPTURE(csv);
  CAPTURE(r.err);
  CHECK(r.status == 0);
  CHECK(r.out.find("calibrated: ") != std::string::npos);
}

TEST_CASE("dcpp-plan: one file by two names is refused, and the input is never written") {
  const std::string text = "100\n7000\n300\n";
  const fs::path in = write("same_in.txt", text);
  const fs::path out = scratch() / "same_out";
  fs::remove(out);
  const auto refused = [](const std::string& args, const std::string& needle) {
    const auto r = run(args);
    CAPTURE(args);
    CAPTURE(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.rfind("dcpp-plan: error: ", 0) == 0);
    CHECK(r.err.find(needle) != std::string::npos);
  };
  const std::string dotted = (scratch() / "." / "same_out").string();
  refused(in.string() + " --json " + out.string() + " --svg " + dotted,
          "--json '" + out.string() + "' and --svg '" + dotted + "' name the same file");
  CHECK_FALSE(fs::exists(out));
  refused(in.string() + " --json " + (scratch() / "." / "same_in.txt").string(),
          "names the input '" + in.string() + "': writing it would replace it");
  refused(in.string() + " --svg " + in.string(), "--svg '" + in.string() + "' names the input");
  CHECK(slurp(in) == text);
  // a symbolic link to the input is the input
  const fs::path link = scratch() / "same_link";
  fs::remove(link);
  fs::create_symlink(in, link);
  refused(in.string() + " --json " + link.string(), "names the input");
  CHECK(slurp(in) == text);
  fs::remove(link);
}

TEST_CASE("dcpp-plan: network options that do not apply are refused") {
  const fs::path ok = write("ok2.txt", "100\n7000\n");
  expect_error(ok.string() + " --estimator length2 --gpus-per-node 4",
               "--estimator length2 (length^2/cp) has none");
  const fs::path cal = write("cal2.csv", "1000,1,0.01\n2000,1,0.021\n4000,1,0.045\n");
  expect_error(ok.string() + " --estimator calibrated:" + cal.string() +
                   " --inter-node-bandwidth 20",
               "do not apply to --estimator calibrated");
  const fs::path bad = write("cal3.csv", "1000,1,2\n2000,1,2\n8000,1,0.5\n16000,1,5\n");
  expect_error(ok.string() + " --estimator calibrated:" + bad.string(),
               "calibration row 3: (length = 8000, cp = 1) measured 0.5 s, 75% below the 2 s of "
               "the shorter length 1000 (row 1)");
  CHECK(run(ok.string() + " --microbatch-overhead -1").status != 0);
  CHECK(run(ok.string() + " --gpus-per-node 0").status != 0);
  CHECK(run(ok.string() + " --inter-node-bandwidth 0").status != 0);
}

TEST_CASE("dcpp-plan: a number option's bad value names the option, the value and the bound") {
  // CLI11's own checks let NaN through and wrote their open bound as DBL_MAX in 309 digits
  const fs::path ok = write("ok4.txt", "100\n7000\n");
  const fs::path json = scratch() / "no_plan.json";
  const struct {
    const char* args;
    const char* needle;
  } cases[] = {
      {"--intra-node-bandwidth -3", "--intra-node-bandwidth: '-3' is not a finite number > 0"},
      {"--inter-node-bandwidth nan", "--inter-node-bandwidth: 'nan' is not a finite number > 0"},
      {"--inter-node-bandwidth 0", "--inter-node-bandwidth: '0' is not a finite number > 0"},
      {"--intra-node-bandwidth 1e400", "'1e400' is not a finite number > 0"},
      {"--microbatch-overhead inf", "--microbatch-overhead: 'inf' is not a finite number >= 0"},
      {"--microbatch-overhead -1e-9", "'-1e-9' is not a finite number >= 0"},
      {"--microbatch-overhead NaN", "'NaN' is not a finite number >= 0"},
      {"--microbatch-overhead fast", "'fast' is not a finite number >= 0"},
      // finite, but past what the planner can sum: 1e308 GB/s is inf bytes/s ("inter_node
      // bandwidth = inf bytes/s" before), 1.7e308 s twice is inf (a step time of inf, an
      // efficiency of NaN and null in the plan JSON before)
      {"--inter-node-bandwidth 1e308",
       "--inter-node-bandwidth = 1e+308 GB/s must be above 0 and at most 1.7976931348623156e+299 "
       "(bytes/s in a double)"},
      {"--microbatch-overhead 1.7e308", "microbatch_overhead = 1.7e+308 exceeds the limit "},
  };
  for (const auto& c : cases) {
    fs::remove(json);
    const auto r = run(ok.string() + " " + c.args + " --json " + json.string());
    CAPTURE(c.args);
    CAPTURE(r.err);
    CHECK(r.status != 0);
    CHECK(r.err.find(c.needle) != std::string::npos);
    CHECK(r.err.size() < 200);
    CHECK(r.out.empty());
    CHECK_FALSE(fs::exists(json));
  }
  // in range, the same options plan
  CHECK(run(ok.string() + " --intra-node-bandwidth 1e3 --microbatch-overhead 0 --quiet").status ==
        0);
}

TEST_CASE("dcpp-plan: an empty path is refused, not taken for none") {
  // `--json ''` (a script's unset variable) printed the table, wrote no file and exited 0
  const fs::path ok = write("ok5.txt", "100\n7000\n");
  for (const char* option : {"--json", "--svg"}) {
    const auto r = run(ok.string() + " " + option + " ''");
    CAPTURE(option);
    CHECK(r.status != 0);
    CHECK(r.err.find(std::string(option) + ": '' is an empty path") != std::string::npos);
    CHECK(r.out.empty());
  }
  const auto r = run("''");
  CHECK(r.status != 0);
  CHECK(r.err.find("'' is an empty path") != std::string::npos);
}

TEST_CASE("dcpp-plan: --extra-microbatches bounds the rounds of balanced") {
  const auto r = run(env("DCPP_DATA") +
                     "/sft_long_tail.txt --world-size 32 --max-tokens-per-rank 8192 --quiet "
                     "--extra-microbatches 0");
  CHECK(r.status == 0);
  CHECK(r.out.find("micro-batches 8") != std::string::npos); // the token minimum here
  CHECK(run(env("DCPP_DATA") + "/sft_long_tail.txt --extra-microbatches -2").status != 0);
}

TEST_CASE("dcpp-plan: --json - writes the document alone to stdout, the rest to stderr") {
  const fs::path wl = write("stdout_wl.txt", "100\n7000\n300\n20000\n");
  const auto r = run(wl.string() + " --world-size 8 --max-tokens-per-rank 8192 --json -");
  CAPTURE(r.err);
  REQUIRE(r.status == 0);
  const auto p = dcpp::read_plan_json(r.out, "stdout"); // nothing but the JSON on stdout
  CHECK(p.lengths.size() == 4);
  CHECK(r.err.find("balanced plan") == std::string::npos); // the table went to stderr ...
  CHECK(r.err.find("micro-batches") != std::string::npos); // ... not to stdout
  // the same bytes as the file (but for the planning time)
  const fs::path json = scratch() / "stdout_same.json";
  REQUIRE(run(wl.string() + " --world-size 8 --max-tokens-per-rank 8192 --json " + json.string())
              .status == 0);
  CHECK(without_timing(r.out) == without_timing(slurp(json)));
  const auto svg = run(wl.string() + " --world-size 8 --max-tokens-per-rank 8192 --svg -");
  REQUIRE(svg.status == 0);
  CHECK(svg.out.rfind("<svg", 0) == 0);
  const auto both = run(wl.string() + " --json - --svg -");
  CHECK(both.status == 1);
  CHECK(both.out.empty());
  CHECK(both.err.find("both ask for standard output") != std::string::npos);
}

TEST_CASE("dcpp-plan: a failed write leaves no file and keeps the old one") {
  const fs::path wl = write("write_wl.txt", "100\n7000\n300\n20000\n");
  const std::string args = wl.string() + " --world-size 8 --max-tokens-per-rank 8192 --quiet";
  const fs::path old = write("old_plan.json", "the previous plan\n");
  // an unwritable --svg: the existing --json target is untouched, nothing else is left
  auto r = run(args + " --json " + old.string() + " --svg " +
               (scratch() / "no_such_dir" / "x.svg").string());
  CHECK(r.status == 1);
  CHECK(r.err.find("--svg: cannot create") != std::string::npos);
  CHECK(slurp(old) == "the previous plan\n");
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(scratch()))
    entries += e.path().filename().string().find(".tmp.") != std::string::npos;
  CHECK(entries == 0);
  // one path for both outputs
  r = run(args + " --json " + old.string() + " --svg " + old.string());
  CHECK(r.status == 1);
  CHECK(r.err.find("both name") != std::string::npos);
  CHECK(slurp(old) == "the previous plan\n");
  // a full device: the error names it, the exit status says so
  if (fs::exists("/dev/full")) {
    r = run(args + " --json /dev/full");
    CHECK(r.status == 1);
    CHECK(r.err.find("'/dev/full': No space left on device") != std::string::npos);
    CHECK(fs::is_character_file("/dev/full")); // written in place, never replaced
  }
  // a directory as the target
  r = run(args + " --json " + scratch().string());
  CHECK(r.status == 1);
  CHECK(r.err.find("Is a directory") != std::string::npos);
  // success replaces the old file whole
  REQUIRE(run(args + " --json " + old.string()).status == 0);
  CHECK_NOTHROW(dcpp::read_plan_json(slurp(old)));
}

TEST_CASE("dcpp-plan: hostile numbers are one-line errors, not signals or hangs") {
  const fs::path wl = write("hostile.txt", "100\n7000\n");
  expect_error(wl.string() + " --max-tokens-per-rank 4611686018427387904",
               "max_tokens_per_rank = 4611686018427387904 exceeds the limit");
  expect_error(wl.string() + " --world-size 2147483647", "world_size = 2147483647 exceeds");
  expect_error(wl.string() + " --padding-unit 2305843009213693952", "padding_unit = ");
  // a multiple of 10^8 planned until killed; a negative static size was taken for 0
  expect_error(wl.string() + " --microbatch-multiple 99999999",
               "microbatch_multiple = 99999999 exceeds the limit 1024");
  expect_error(wl.string() + " --policy static_cp --static-cp -1", "static cp = -1 must be >= 0");
}

TEST_CASE("dcpp-plan: hostile inputs are one-line errors, never an abort (issue 22)") {
  // a directory as input (was an uncaught std::ios_base::failure)
  const fs::path dir = scratch() / "a_directory";
  fs::create_directories(dir);
  expect_error(dir.string(), fmt::format("input: cannot read '{}': Is a directory", dir.string()));
  // a value nested 100,000 deep (the error message dumped it recursively: a stack overflow)
  const std::string deep =
      "{\"seqlens\": [" + std::string(100000, '[') + std::string(100000, ']') + "]}";
  expect_error(write("deep.json", deep).string(), "JSON nested deeper than 64 levels");
  const std::string nested = "{\"seqlens\": [100, [[[[1]]]]]}";
  expect_error(write("nested.json", nested).string(),
               "seqlens[1] = an array (1 elements) must be a positive integer length");
  // numbers past the range of the field: named, not wrapped
  expect_error(write("big.json", "{\"seqlens\": [100], \"total_gpus\": 4294967297}").string(),
               "field 'total_gpus' = 4294967297 must be an integer from 1 to 16777216");
  // within the integer type but past the planner's limit: the field named, not the option
  expect_error(
      write("vpp.json", "{\"seqlens\": [100], \"vpp_microbatch_group_size\": 5000}").string(),
      "field 'vpp_microbatch_group_size' = 5000 must be an integer from 1 to 1024");
  expect_error(write("huge.json", "{\"seqlens\": [18446744073709551615]}").string(),
               "seqlens[0] = 18446744073709551615 must be a positive integer length");
  expect_error(write("frac.json", "{\"seqlens\": [100.5]}").string(),
               "seqlens[0] = 100.5 must be a positive integer length");
  // measured times that fall with the length, or a fit that prices the batch at zero: refused,
  // naming the rows or the length
  const fs::path falling = write("falling.csv", "length,cp,seconds\n1000,1,2.0\n2000,1,1.5\n"
                                                "4000,1,1.0\n");
  expect_error(
      write("l3.txt", "1000\n4000\n2000\n").string() +
          " --world-size 1 --max-tokens-per-rank 16384 --estimator calibrated:" + falling.string(),
      "calibration row 3: (length = 4000, cp = 1) measured 1 s, 50% below the 2 s of the "
      "shorter length 1000 (row 1)");
  const fs::path steep = write("steep.csv", "length,cp,seconds\n1000,1,1.0\n2000,1,4.5\n"
                                            "4000,1,20\n");
  expect_error(
      write("l100.txt", "100\n").string() +
          " --world-size 1 --max-tokens-per-rank 16384 --estimator calibrated:" + steep.string(),
      "calibrated: the fit prices a sample of length 100 on 1 ranks at 0 s, not a time "
      "> 0 (the calibration rows measured lengths 1000 to 4000");
  // a measured time that is no time: named by the file and line (the fit named a row number)
  const fs::path nan_row =
      write("nan_row.csv", "length,cp,seconds\n1000,1,2.0\n# 2K\n2000,2,nan\n4000,1,1.0\n");
  expect_error(
      write("l1.txt", "1000\n").string() +
          " --world-size 2 --max-tokens-per-rank 16384 --estimator calibrated:" + nan_row.string(),
      nan_row.string() + ":4: seconds = nan must be a finite time > 0");
  // a world too large for this machine's memory is refused by its limit, not by bad_alloc
  expect_error(write("w.txt", "100\n").string() + " --world-size 2147483647",
               "world_size = 2147483647 exceeds the limit 16777216");
  // a binary file: its line quoted cut, its control bytes escaped (they were written raw)
  std::string binary = "\x01\x02\x1b[31m";
  for (int i = 0; i < 5000; ++i)
    binary += static_cast<char>('A' + i % 26);
  // an endless device (it was read until the memory ran out) and a file with a NUL byte
  expect_error("/dev/zero", "input: '/dev/zero' holds a NUL byte (byte 0): it is not text");
  expect_error(write("nul.txt", std::string("100\n200\n\0", 9)).string(),
               "holds a NUL byte (byte 8): it is not text");
  expect_error(write("one.txt", "100\n").string() + " --estimator calibrated:/dev/zero",
               "--estimator calibrated: '/dev/zero' holds a NUL byte (byte 0): it is not text");
  expect_error(write("binary.txt", binary + "\n").string(),
               "binary.txt:1: '\\x01\\x02\\x1b[31mABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG...' "
               "(5007 characters) is not an integer length");
}

TEST_CASE("dcpp-plan: an endless stream is refused after 1 GiB, not read until memory runs out") {
  const fs::path out = scratch() / "stdout.txt";
  const fs::path err = scratch() / "stderr.txt";
  const fs::path json = scratch() / "endless.json";
  const std::string command = "yes 5 | " + env("DCPP_PLAN") + " - --json " + json.string() + " >" +
                              out.string() + " 2>" + err.string();
  const int raw = std::system(command.c_str());
  REQUIRE(WIFEXITED(raw));
  CHECK(WEXITSTATUS(raw) == 1);
  CHECK(slurp(err) ==
        "dcpp-plan: error: input: '<stdin>' holds more than the limit of 1073741824 bytes\n");
  CHECK_FALSE(fs::exists(json));
}

TEST_CASE("dcpp-plan: a file saved with a byte order mark plans as without it") {
  // the first length was refused as '\xEF\xBB\xBF100' and a JSON batch was read as text
  const auto plain = run(write("plain.txt", "100\n5000\n").string() + " --world-size 4 --json -");
  const auto marked =
      run(write("marked.txt", std::string("\xEF\xBB\xBF") + "100\n5000\n").string() +
          " --world-size 4 --json -");
  REQUIRE(plain.status == 0);
  REQUIRE(marked.status == 0);
  CHECK(without_timing(marked.out) == without_timing(plain.out));
  const auto json = run(write("marked.json", "\xEF\xBB\xBF{\"seqlens\": [100, 5000]}").string() +
                        " --world-size 4 --json -");
  REQUIRE(json.status == 0);
  CHECK(without_timing(json.out) == without_timing(plain.out));
}
