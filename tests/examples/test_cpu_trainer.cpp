// The proof that dynamic CP changes nothing but speed: the CPU trainer under `mpirun -np 4`
// (dynamic CP: long samples split over 2-4 ranks, micro-batches routed) and on one rank give the
// same losses and final weights up to fp32 summation order; and the model learns its task.
// `--calibrate` prints rows dcpp-plan's calibration reader takes.
#include "../support.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "dcpp/io/batch_input.hpp"
#include "trainer_runs.hpp"

namespace {
trainer_runs::run_output train(int ranks, int steps, const std::string& tag,
                               const std::string& extra = "") {
  return trainer_runs::train(trainer_runs::env("DCPP_CPU_TRAINER"), ranks, steps, "cpu_" + tag, -1,
                             extra);
}
} // namespace

TEST_CASE("cpu trainer: dynamic CP on 4 ranks gives the losses and weights of one rank") {
  const auto four = train(4, 5, "np4");
  const auto one = train(1, 5, "np1");
  REQUIRE(four.losses.size() == 5);
  REQUIRE(one.losses.size() == 5);
  // fp32: the runs add the same per-token terms in different orders (micro-batches, CP splits
  // of attention and conv, the gradient all-reduce), each step's difference is a few fp32
  // roundings (measured: losses within 6e-9 relative, weights within 6e-8 of max |w| ~ 1 after 6
  // steps); momentum SGD is linear in the gradients, so over 5 steps 1e-6 is a wide margin that
  // still catches a lost, doubled or misrouted token (which moves the loss by ~1e-3).
  for (std::size_t s = 0; s < 5; ++s)
    CHECK(std::abs(four.losses[s] - one.losses[s]) <= 1e-6 * std::abs(one.losses[s]));
  const auto [max_diff, max_w] = trainer_runs::weight_difference(four, one);
  INFO("max weight difference " << max_diff << " of max |w| " << max_w);
  CHECK(max_diff <= 1e-5 * max_w);
}

TEST_CASE("cpu trainer: CP groups of 4 (each head of the head-parallel layer on two ranks) give "
          "the losses and weights of one rank") {
  // 256 tokens per rank: the samples of 300-1000 tokens need CP groups of 2 and 4 (measured: 24
  // of 48 micro-batch slots in 5 steps on groups of 4); the data are those of one rank at its
  // default 1,024, since a sample's length is capped at the world's tokens (4 x 256)
  const auto four = train(4, 5, "np4_cp4", "--max-tokens-per-rank 256");
  const auto one = train(1, 5, "np1_cp4");
  REQUIRE(four.losses.size() == 5);
  REQUIRE(one.losses.size() == 5);
  CHECK(*std::max_element(four.largest_cp.begin(), four.largest_cp.end()) == 4);
  for (std::size_t s = 0; s < 5; ++s)
    CHECK(std::abs(four.losses[s] - one.losses[s]) <= 1e-6 * std::abs(one.losses[s]));
  const auto [max_diff, max_w] = trainer_runs::weight_difference(four, one);
  INFO("max weight difference " << max_diff << " of max |w| " << max_w);
  CHECK(max_diff <= 1e-5 * max_w);
}

TEST_CASE("cpu trainer: the loss falls under dynamic CP (the task is learnt)") {
  const auto run = train(4, 30, "learn");
  REQUIRE(run.losses.size() == 30);
  const double first = (run.losses[0] + run.losses[1] + run.losses[2]) / 3;
  const double last = (run.losses[27] + run.losses[28] + run.losses[29]) / 3;
  INFO("loss " << first << " -> " << last);
  CHECK(first > 2.6);        // ln 16 = 2.77 at the start
  CHECK(last < 0.6 * first); // measured: 2.78 -> ~1.0 in 30 steps
  for (const double e : run.efficiency)
    CHECK(e > 0.5);
}

namespace {
struct calibration_run {
  int exit_code = 0;
  std::string out, err;
};
calibration_run run_calibration(int ranks, const std::string& args, const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() / ("dcpp_calibrate_" + tag);
  std::filesystem::create_directories(dir);
  const std::string cmd =
      fmt::format("{} -np {} {} {} > {} 2> {}", trainer_runs::env("DCPP_MPIEXEC"), ranks,
                  trainer_runs::env("DCPP_CPU_TRAINER"), args, (dir / "out.csv").string(),
                  (dir / "err.txt").string());
  const int status = std::system(cmd.c_str());
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  calibration_run r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out.csv"),
                    slurp(dir / "err.txt")};
  std::filesystem::remove_all(dir);
  return r;
}
} // namespace

TEST_CASE("cpu trainer --calibrate: rows in the calibration format, one per length and CP size") {
  const auto run = run_calibration(2, "--calibrate 3,40,600 --calibrate-repeats 2", "np2");
  INFO("stdout:\n" << run.out << "\nstderr:\n" << run.err);
  REQUIRE(run.exit_code == 0);
  // dcpp-plan's own reader takes the output as it is (header and comment included)
  std::istringstream in(run.out);
  const auto rows = dcpp::read_calibration(in, "cpu_trainer --calibrate");
  std::set<std::pair<std::int64_t, int>> seen;
  int microbatch_rows = 0;
  for (const auto& r : rows) {
    CHECK(r.seconds > 0);
    CHECK(std::isfinite(r.seconds));
    if (r.microbatch) {
      ++microbatch_rows;
      continue;
    }
    // lengths as asked, power-of-two sizes dividing the world, at least 2 tokens per rank
    CHECK((r.length == 3 || r.length == 40 || r.length == 600));
    CHECK((r.cp == 1 || r.cp == 2));
    CHECK(r.length >= 2 * r.cp);
    CHECK(seen.insert({r.length, r.cp}).second); // no row twice
  }
  CHECK(microbatch_rows == 1);
  // a row within the fixed cost is left out with a message naming it; every other row is there
  std::size_t left_out = 0;
  for (std::size_t at = run.err.find("row left out"); at != std::string::npos;
       at = run.err.find("row left out", at + 1))
    ++left_out;
  CHECK(seen.size() + left_out == 5); // (3,1) (40,1) (40,2) (600,1) (600,2)
}

TEST_CASE("cpu trainer --calibrate: bad lengths are refused before anything runs") {
  for (const char* bad : {"1", "0,64", "-5", "64,x"}) {
    const auto run = run_calibration(2, fmt::format("--calibrate {}", bad), "bad");
    INFO(bad << ": " << run.err << run.out);
    CHECK(run.exit_code != 0);
    CHECK(run.out.find("length,cp,seconds") == std::string::npos);
    CHECK(run.err.find("--calibrate") != std::string::npos);
  }
}

TEST_CASE("cpu trainer: a NaN or infinite --lr or --momentum, or a signed --seed, is refused "
          "before training") {
  // CLI11's number checks let NaN through: the trainer then trained to a NaN loss and exited 0
  const std::pair<const char*, const char*> cases[] = {
      {"--lr nan", "--lr: 'nan' is not a finite number > 0"},
      {"--lr inf", "--lr: 'inf' is not a finite number > 0"},
      {"--lr 0", "--lr: '0' is not a finite number > 0"},
      // the rate is applied in float: 1e300 was inf, and the weights NaN after one step
      {"--lr 1e300", "--lr: '1e300' is not a finite number > 0 within a float (1.1754944e-38 to "
                     "3.4028235e+38)"},
      {"--lr 1e-50", "--lr: '1e-50' is not a finite number > 0 within a float"},
      {"--momentum nan", "--momentum: 'nan' is not a finite number from 0 to 0.999"},
      {"--momentum 1", "--momentum: '1' is not a finite number from 0 to 0.999"},
      // made samples of negative length (an "internal error" from std::vector)
      {"--max-tokens-per-rank -5", "--max-tokens-per-rank: Value -5 not in range 0 to"},
      {"--max-tokens-per-rank 1", "max_tokens_per_rank = 1 is below the padding unit"},
      // CLI11 alone took -1 for the seed 2^64 - 1
      {"--seed -1", "--seed: '-1' is not an integer from 0 to 18446744073709551615"},
      {"--seed 18446744073709551616",
       "--seed: '18446744073709551616' is not an integer from 0 to 18446744073709551615"},
      {"--seed 1.5", "--seed: '1.5' is not an integer from 0 to"},
      // an empty path (a script's unset variable) was taken for none: no log, exit 0
      {"--log ''", "--log: '' is an empty path"},
      {"--weights ''", "--weights: '' is an empty path"},
  };
  for (const auto& [args, needle] : cases) {
    const auto run = run_calibration(1, fmt::format("--steps 2 {}", args), "badnum");
    INFO(args << ": " << run.err << run.out);
    CHECK(run.exit_code != 0);
    CHECK(run.err.find(needle) != std::string::npos);
    CHECK(run.out.find("step") == std::string::npos); // no step ran
  }
}

TEST_CASE("cpu trainer: a run that diverges stops on every rank, naming the step and --lr") {
  // a loss of NaN was printed step after step, and the run exited 0 with NaN weights
  const auto log = std::filesystem::temp_directory_path() / "dcpp_diverged_log.json";
  std::filesystem::remove(log);
  const auto run =
      run_calibration(2, fmt::format("--steps 6 --lr 1e30 --log {}", log.string()), "diverge");
  INFO(run.err << run.out);
  CHECK(run.exit_code == 1);
  CHECK(run.out.find("step    1/6") != std::string::npos); // the first step's loss is a number
  CHECK(run.err.find("step 2: the mean loss is nan: the training has diverged (try a smaller "
                     "--lr than 1e+30)") != std::string::npos);
  CHECK(run.out.find("step    3/6") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(log)); // no log of a failed run
}

TEST_CASE("cpu trainer: an odd token budget trains (its samples end at the longest it can plan)") {
  // a budget of 3 on one rank plans samples of at most 2 tokens (padded to a multiple of 2); the
  // samples were cut at 3 and the plan refused the first of them
  const auto run = run_calibration(1, "--steps 2 --max-tokens-per-rank 3", "odd");
  INFO(run.err << run.out);
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("step    2/2") != std::string::npos);
}

TEST_CASE("cpu trainer: the largest --seed trains") {
  const auto run = run_calibration(1, "--steps 1 --seed 18446744073709551615", "seedmax");
  INFO(run.err << run.out);
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("step    1/1") != std::string::npos);
}

TEST_CASE("cpu trainer: an unwritable --log fails on every rank before training") {
  const auto run = run_calibration(
      2, "--steps 50 --log /nonexistent_dcpp_dir/log.json --weights /tmp/dcpp_unused_w.npy",
      "badlog");
  INFO(run.err << run.out);
  CHECK(run.exit_code != 0);
  CHECK(run.err.find("--log: cannot create a file beside '/nonexistent_dcpp_dir/log.json'") !=
        std::string::npos);
  CHECK(run.out.find("step") == std::string::npos); // no step ran
  CHECK_FALSE(std::filesystem::exists("/tmp/dcpp_unused_w.npy"));
}

TEST_CASE("cpu trainer: --log and --weights naming one file are refused before training") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_trainer_same";
  std::filesystem::create_directories(dir);
  const std::string x = (dir / "x").string();
  const std::string dot = (dir / "." / "x").string();
  const auto run =
      run_calibration(2, fmt::format("--steps 5 --log {} --weights {}", x, dot), "samefile");
  INFO(run.err << run.out);
  CHECK(run.exit_code != 0);
  CHECK(run.err.find(fmt::format("--log '{}' and --weights '{}' name the same file", x, dot)) !=
        std::string::npos);
  CHECK(run.out.find("step") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(x));
  std::filesystem::remove_all(dir);
}

TEST_CASE("cpu trainer: a flag refused on one rank stops every rank, not a hang") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_trainer_badflag";
  std::filesystem::create_directories(dir);
  const std::string program = trainer_runs::env("DCPP_CPU_TRAINER");
  for (const std::string bad : {"--steps abc", "--steps 0", "--no-such-flag", "--help"}) {
    const std::string cmd =
        fmt::format("timeout 120 {0} -np 1 {1} --steps 2 --quiet : -np 1 {1} {2} > {3} 2>&1",
                    trainer_runs::env("DCPP_MPIEXEC"), program, bad, (dir / "out.txt").string());
    const int status = std::system(cmd.c_str());
    std::ifstream in(dir / "out.txt");
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(bad << ": " << all);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) != 124); // the ranks did not hang
    CHECK(WEXITSTATUS(status) != 0);
    CHECK(all.find("another rank's flags were refused; every rank stops") != std::string::npos);
    CHECK(all.find("step    1/") == std::string::npos); // no step ran
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("cpu trainer: ranks started with different options fail together, not hang") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_trainer_mpmd";
  std::filesystem::create_directories(dir);
  const std::string program = trainer_runs::env("DCPP_CPU_TRAINER");
  const std::string cmd = fmt::format(
      "timeout 120 {0} -np 1 {1} --steps 2 --quiet : -np 1 {1} --steps 3 --quiet > {2} 2>&1",
      trainer_runs::env("DCPP_MPIEXEC"), program, (dir / "out.txt").string());
  const int status = std::system(cmd.c_str());
  std::ifstream in(dir / "out.txt");
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove_all(dir);
  INFO(all);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK(WEXITSTATUS(status) != 124); // not the timeout: the ranks did not hang
  CHECK(all.find("ranks disagree on the trainer's options") != std::string::npos);
}
