// Runs one of the example trainers (cpu_trainer, gpu_trainer) as a child process, optionally
// under mpiexec, and reads back its JSON log and final weights.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dcpp/io/npy.hpp"

namespace trainer_runs {

inline std::string env(const char* name) {
  const char* p = std::getenv(name);
  REQUIRE_MESSAGE(p != nullptr,
                  "environment variable " << name << " is not set (meson test sets it)");
  return p;
}

struct run_output {
  int exit_code = 0;
  std::vector<double> losses;
  std::vector<double> efficiency;
  std::vector<int> largest_cp; //!< per step, the plan's largest CP group
  std::vector<double> weights;
};

//! `program` for `steps` steps on `ranks` ranks (0: run directly, without mpiexec). A non-zero
//! exit fails the test unless it is `allowed_exit` (then only exit_code is set).
//! `extra` is appended to the command line.
inline run_output train(const std::string& program, int ranks, int steps, const std::string& tag,
                        int allowed_exit = -1, const std::string& extra = "") {
  const auto dir = std::filesystem::temp_directory_path() / ("dcpp_trainer_" + tag);
  std::filesystem::create_directories(dir);
  const std::string launcher =
      ranks == 0 ? std::string() : fmt::format("{} -np {} ", env("DCPP_MPIEXEC"), ranks);
  const std::string cmd = fmt::format("{}{} --steps {} --quiet --log {} --weights {} {} > {} 2>&1",
                                      launcher, program, steps, (dir / "log.json").string(),
                                      (dir / "w.npy").string(), extra, (dir / "out.txt").string());
  const int status = std::system(cmd.c_str());
  run_output out;
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (out.exit_code != 0) {
    std::ifstream in(dir / "out.txt");
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::filesystem::remove_all(dir);
    if (out.exit_code == allowed_exit)
      return out;
    FAIL(program << " exited with " << out.exit_code << ": " << all);
  }
  std::ifstream in(dir / "log.json");
  const auto log = nlohmann::json::parse(in);
  CHECK(log["world_size"] == (ranks == 0 ? 1 : ranks));
  for (const auto& s : log["steps"]) {
    out.losses.push_back(s["loss"].get<double>());
    out.efficiency.push_back(s["plan_efficiency"].get<double>());
    out.largest_cp.push_back(s["largest_cp"].get<int>());
  }
  out.weights = dcpp::read_npy((dir / "w.npy").string()).as<double>("weights");
  std::filesystem::remove_all(dir);
  return out;
}

//! Largest |a - b| over the weights, and the largest |b|.
inline std::pair<double, double> weight_difference(const run_output& a, const run_output& b) {
  REQUIRE(a.weights.size() == b.weights.size());
  double max_w = 0, max_diff = 0;
  for (std::size_t i = 0; i < b.weights.size(); ++i) {
    max_w = std::max(max_w, std::abs(b.weights[i]));
    max_diff = std::max(max_diff, std::abs(a.weights[i] - b.weights[i]));
  }
  return {max_diff, max_w};
}

} // namespace trainer_runs
