// What the CPU trainer (cpu_trainer.cpp) and the GPU trainer (gpu_trainer.cpp) share: the model
// shape, the flat parameter vector and its seeded initialisation, the synthetic task's data
// shards, the command line and the per-step report (progress line and JSON log). Both trainers
// run the same model on the same data, so their logs can be compared.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <dcpp/comm/communicator.hpp>
#include <dcpp/dcpp.hpp>
#include <dcpp/io/atomic_file.hpp>
#include <dcpp/io/npy.hpp>
#include <dcpp/loss/token_mean.hpp>
#include <dcpp/route/fields.hpp>
#include <dcpp/route/router.hpp>

#include "../cli_checks.hpp"

namespace trainer {

constexpr int vocab = 16, dim = 64, hidden = 128, width = 4;
//! The head-parallel layer's heads (of dim / scan_heads channels). Two, so that a CP group of 4
//! deals each head to two ranks (the exchange's replicated-head case) and one of 2 deals one head
//! to each rank.
constexpr int scan_heads = 2, scan_head_dim = dim / scan_heads;
static_assert(dim % scan_heads == 0);

//! All parameters in one flat vector (one all-reduce for the gradients), with named offsets.
struct parameters {
  std::vector<float> data;
  std::size_t embed, conv_w, conv_b, wq, wk, wv, wo, w1, w2, gate, out, total;
  parameters() {
    std::size_t at = 0;
    auto take = [&at](std::size_t n) {
      const std::size_t here = at;
      at += n;
      return here;
    };
    embed = take(vocab * dim), conv_w = take(dim * width), conv_b = take(dim);
    wq = take(dim * dim), wk = take(dim * dim), wv = take(dim * dim), wo = take(dim * dim);
    w1 = take(dim * hidden), w2 = take(hidden * dim), gate = take(scan_heads);
    out = take(dim * vocab);
    total = at;
    data.assign(total, 0.0f);
  }
  float* operator()(std::size_t offset) { return data.data() + offset; }
  const float* operator()(std::size_t offset) const { return data.data() + offset; }
};

//! Seeded initialisation, identical on every rank (uniform, scaled by 1/sqrt(fan-in)).
inline void initialise(parameters& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto fill = [&](std::size_t at, std::size_t n, double scale) {
    std::uniform_real_distribution<double> u(-scale, scale);
    for (std::size_t i = 0; i < n; ++i)
      p.data[at + i] = static_cast<float>(u(rng));
  };
  fill(p.embed, vocab * dim, 1.0);
  fill(p.conv_w, dim * width, 0.5);
  fill(p.conv_b, dim, 0.1);
  for (const auto at : {p.wq, p.wk, p.wv, p.wo})
    fill(at, dim * dim, 1.0 / std::sqrt(dim));
  fill(p.w1, dim * hidden, 1.0 / std::sqrt(dim));
  fill(p.w2, hidden * dim, 1.0 / std::sqrt(hidden));
  fill(p.gate, scan_heads, 1.0);
  fill(p.out, dim * vocab, 1.0 / std::sqrt(dim));
}

using shard_type =
    dcpp::token_shard<dcpp::fields::token_ids, dcpp::fields::labels, dcpp::fields::loss_mask>;

//! Appends one sample of the synthetic task to `shard`: two tokens drawn from `rng`, then
//! x[t] = (x[t-2] + 3) mod vocab; labels are the next token, the loss mask covers tokens 1..L-2.
inline void append_sample(shard_type& shard, std::int64_t length, std::mt19937_64& rng) {
  std::vector<std::int32_t> x(static_cast<std::size_t>(length));
  x[0] = static_cast<std::int32_t>(rng() % vocab);
  if (length > 1)
    x[1] = static_cast<std::int32_t>(rng() % vocab);
  for (std::size_t t = 2; t < x.size(); ++t)
    x[t] = (x[t - 2] + 3) % vocab;
  shard.lengths.push_back(length);
  for (std::int64_t t = 0; t < length; ++t) {
    const auto ut = static_cast<std::size_t>(t);
    shard.get<dcpp::fields::token_ids>().push_back(x[ut]);
    shard.get<dcpp::fields::labels>().push_back(t + 1 < length ? x[ut + 1] : -100);
    shard.get<dcpp::fields::loss_mask>().push_back(t >= 1 && t + 1 < length ? 1 : 0);
  }
}

//! The step's global samples (identical for every world size): sample i of step s is one of the
//! task's samples (`append_sample`) with a seeded, long-tailed length.
//! Rank r holds the samples i with i % world == r.
inline shard_type make_shard(int step, int samples, std::uint64_t seed, int rank, int world,
                             std::int64_t max_length) {
  shard_type shard;
  for (int i = 0; i < samples; ++i) {
    std::mt19937_64 rng(seed * 1000003u + static_cast<std::uint64_t>(step) * 7919u +
                        static_cast<std::uint64_t>(i));
    const bool tail = rng() % 6 == 0;
    const std::int64_t length =
        std::min<std::int64_t>(max_length, tail ? 300 + static_cast<std::int64_t>(rng() % 700)
                                                : 3 + static_cast<std::int64_t>(rng() % 120));
    if (i % world == rank)
      append_sample(shard, length, rng);
  }
  return shard;
}

//! Loss tokens of a shard (the global count normalises every token's gradient).
inline double loss_tokens(const shard_type& shard) {
  double count = 0;
  for (const auto m : shard.get<dcpp::fields::loss_mask>())
    count += m;
  return count;
}

//! Step `step`'s all-reduced loss, checked: its loss tokens are the shards' (`counted`, reduced
//! before the forward), and its mean is a number (NaN or inf: the run has diverged, and every
//! later step would train on it). Both are the same on every rank, so the ranks stop together.
//! `step` counts from 0, the messages from 1 (as the progress lines do).
inline void check_step(int step, const dcpp::token_mean& mean, const dcpp::token_mean& counted,
                       double lr) {
  if (mean.counts[0] != counted.counts[0])
    throw dcpp::error(dcpp::status_code::invalid_length,
                      fmt::format("step {}: {} loss tokens reduced, {} in the shards", step + 1,
                                  mean.counts[0], counted.counts[0]));
  if (!std::isfinite(mean.mean[0]))
    throw dcpp::error(
        dcpp::status_code::invalid_option,
        fmt::format("step {}: the mean loss is {}: the training has diverged (try "
                    "a smaller --lr than {})",
                    step + 1, std::isnan(mean.mean[0]) ? "nan" : fmt::format("{}", mean.mean[0]),
                    lr));
}

//! The command line both trainers take.
struct options {
  int steps = 40, samples = 16;
  double lr = 0.1, momentum = 0.9;
  std::int64_t budget = 0;
  std::uint64_t seed = 1;
  std::string log_path, weights_path;
  bool quiet = false;
  std::vector<std::int64_t> calibrate_lengths; //!< `--calibrate`: measure instead of training
  int calibrate_repeats = 3;

  void add_to(CLI::App& app) {
    app.add_option("--steps", steps, "training steps")
        ->transform(dcpp_cli::decimal(steps))
        ->check(CLI::Range(1, 100000));
    app.add_option("--samples", samples, "samples per step (over all ranks)")
        ->transform(dcpp_cli::decimal(samples))
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--lr", lr, "SGD learning rate (applied in float)")
        ->check(dcpp_cli::positive_float());
    app.add_option("--momentum", momentum, "SGD momentum")->check(dcpp_cli::finite_in(0.0, 0.999));
    app.add_option("--max-tokens-per-rank", budget,
                   "token budget per rank and micro-batch (0, the default: 512, or 1024 on one "
                   "rank)")
        ->transform(dcpp_cli::decimal(budget))
        ->check(CLI::Range(std::int64_t{0}, dcpp::max_tokens_per_rank_limit));
    app.add_option("--seed", seed, "data and initialisation seed (0 to 2^64 - 1)")
        ->check(dcpp_cli::unsigned_integer());
    app.add_option("--log", log_path, "write a JSON log of every step here (rank 0)")
        ->check(dcpp_cli::path());
    app.add_option("--weights", weights_path, "write the final weights here as .npy (rank 0)")
        ->check(dcpp_cli::path());
    app.add_flag("--quiet", quiet, "no per-step output");
    app.add_option("--calibrate", calibrate_lengths,
                   "measure instead of training: time one sample of each of these lengths "
                   "(comma-separated) on every power-of-two CP group that divides the world, and "
                   "a micro-batch's fixed cost; prints the CSV rows that dcpp-plan --estimator "
                   "calibrated:FILE fits")
        ->transform(dcpp_cli::decimal())
        ->delimiter(',')
        ->check(CLI::Range(std::int64_t{2}, std::int64_t{1} << 40));
    app.add_option("--calibrate-repeats", calibrate_repeats,
                   "timed runs per calibration row, after one warm-up (the median is printed)")
        ->transform(dcpp_cli::decimal(calibrate_repeats))
        ->check(CLI::Range(1, 1000));
  }
  //! The planner's options for `world` ranks: the token budget is the flag's, or by default 512
  //! (1024 on one rank). Checked before any sample is made for them (the samples are at most
  //! `dcpp::max_plannable_length` of these).
  [[nodiscard]] dcpp::plan_options plan_options_for(int world) const {
    dcpp::plan_options out;
    out.world_size = world;
    out.max_tokens_per_rank = budget != 0 ? budget : world == 1 ? 1024 : 512;
    dcpp::throw_if_failed(dcpp::check_options(out));
    return out;
  }
};

//! `--calibrate`: the rows `dcpp-plan --estimator calibrated:FILE` fits, measured on this
//! cluster with this model. For every length L of `o.calibrate_lengths` and every power-of-two
//! CP size cp that divides the world (L >= 2 cp), one micro-batch holding the one sample on the
//! ranks [0, cp) is planned, routed and run forward and backward `o.calibrate_repeats` times
//! after a warm-up; a run's time is the slowest rank's, from a barrier to the end of its work;
//! the row is the median. The micro-batch's fixed cost (routing, launches, synchronisation) is
//! measured the same way on a micro-batch holding one 2-token sample, printed as the
//! `microbatch` row and taken off every sample row, since the fit prices it per micro-batch and
//! not per sample. A sample row within that cost (nothing left to fit) is left out, with a
//! message. `run(router, shard)` runs every micro-batch of the router's plan in which this rank
//! takes part and returns when its work is done. Rows go to stdout on rank 0, messages to
//! stderr.
template <class Comm, class Run>
void calibrate(Comm& world, const options& o, std::string_view program, Run&& run) {
  const bool leader = world.rank() == 0;
  auto median_seconds = [&](std::int64_t length, std::int32_t cp) {
    dcpp::plan_options po;
    po.world_size = world.size();
    po.min_cp = po.max_cp = cp;
    po.max_tokens_per_rank = std::max<std::int64_t>(2, dcpp::tokens_per_rank(po, length, cp));
    dcpp::planner<> planner(po);
    shard_type shard;
    if (leader) {
      std::mt19937_64 rng(o.seed * 1000003u + static_cast<std::uint64_t>(length));
      append_sample(shard, length, rng);
    }
    auto router = dcpp::plan_step(planner, world, shard, dcpp::placement::as_planned);
    std::vector<double> seconds;
    for (int r = 0; r <= o.calibrate_repeats; ++r) { // r == 0: warm-up
      world.barrier();
      const auto start = std::chrono::steady_clock::now();
      run(router, shard);
      std::vector<double> t{
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
      world.all_reduce(std::span<double>(t), dcpp::reduce_op::max);
      if (r > 0)
        seconds.push_back(t[0]);
    }
    std::sort(seconds.begin(), seconds.end());
    const std::size_t n = seconds.size();
    return n % 2 == 1 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  };
  const double fixed = median_seconds(2, 1);
  if (leader) {
    fmt::print("# {} --calibrate on {} ranks: median of {} runs per row; a sample row is its "
               "micro-batch's time less the micro-batch's fixed cost (the microbatch row)\n"
               "length,cp,seconds\nmicrobatch,{:.6g}\n",
               program, world.size(), o.calibrate_repeats, fixed);
    std::fflush(stdout);
  }
  for (const std::int64_t length : o.calibrate_lengths)
    for (std::int32_t cp = 1; cp <= world.size() && 2 * std::int64_t{cp} <= length; cp *= 2) {
      if (world.size() % cp != 0)
        continue;
      const double seconds = median_seconds(length, cp) - fixed;
      if (!leader)
        continue;
      if (seconds > 0)
        fmt::print("{},{},{:.6g}\n", length, cp, seconds);
      else
        fmt::print(stderr,
                   "{}: length {} on {} ranks took no longer than the micro-batch's fixed cost "
                   "({:.3g} s); row left out (measure longer samples)\n",
                   program, length, cp, fixed);
      std::fflush(stdout);
    }
}

//! Before anything runs: every rank was started with the same options (else every rank fails
//! with one message, instead of waiting forever for a step the others never take, or training
//! replicas from different seeds), and rank 0 can create the files it writes at the end (else
//! every rank fails now, not after training).
template <class Comm>
void check_start(Comm& world, const options& o) {
  std::uint64_t h = 1469598103934665603ULL;
  const auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ULL; };
  mix(static_cast<std::uint64_t>(o.steps));
  mix(static_cast<std::uint64_t>(o.samples));
  mix(std::bit_cast<std::uint64_t>(o.lr));
  mix(std::bit_cast<std::uint64_t>(o.momentum));
  mix(static_cast<std::uint64_t>(o.budget));
  mix(o.seed);
  mix(static_cast<std::uint64_t>(o.calibrate_repeats));
  for (const std::int64_t length : o.calibrate_lengths)
    mix(static_cast<std::uint64_t>(length));
  dcpp::check_same_everywhere(world, h,
                              "the trainer's options (--steps, --samples, --lr, --momentum, "
                              "--max-tokens-per-rank, --seed, --calibrate, --calibrate-repeats)");
  dcpp::status writable = dcpp::status::success();
  if (world.rank() == 0 && !o.log_path.empty() && !o.weights_path.empty() &&
      dcpp::same_file(o.log_path, o.weights_path))
    writable = dcpp::status::failure(
        dcpp::status_code::invalid_option,
        fmt::format("--log '{}' and --weights '{}' name the same file; give two files", o.log_path,
                    o.weights_path));
  if (world.rank() == 0 && writable)
    for (const auto& [path, flag] :
         {std::pair{&o.log_path, "--log"}, std::pair{&o.weights_path, "--weights"}}) {
      if (path->empty())
        continue;
      try {
        const dcpp::staged_file probe(*path, flag); // removed again: nothing is written yet
      } catch (const dcpp::error& e) {
        writable = e.why();
        break;
      }
    }
  dcpp::throw_unless_agreed(world, writable);
}

//! Parses the flags on every rank and agrees on the outcome: a rank whose flags are refused, or
//! that asks for --help, stops every rank, instead of leaving the others waiting in their first
//! collective. The refused ranks print their error (rank 0's alone where it is among them);
//! the others say why they stop. Returns the exit code when the run stops, nullopt when every
//! rank parsed its flags.
template <class Communicator>
std::optional<int> parse_on_every_rank(CLI::App& app, int argc, char** argv, Communicator& world,
                                       std::string_view program) {
  std::exception_ptr refused;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError&) {
    refused = std::current_exception();
  }
  const std::uint64_t mine = refused ? 1 : 0;
  const bool any = world.all_reduce_max(mine) != 0;
  const bool first = world.all_reduce_max(world.rank() == 0 ? mine : 0) != 0;
  if (!any)
    return std::nullopt;
  if (!refused) {
    if (world.rank() == 0 && !first)
      fmt::print(stderr, "{}: another rank's flags were refused; every rank stops\n", program);
    return 1;
  }
  try {
    std::rethrow_exception(refused);
  } catch (const CLI::ParseError& e) {
    if (world.rank() != 0 && first)
      return e.get_exit_code(); // rank 0 says it
    if (world.rank() != 0)
      fmt::print(stderr, "{} rank {}: ", program, world.rank());
    return app.exit(e);
  }
  return 1;
}

//! Rank 0's report: a progress line per step (one updating line on a terminal) and the JSON log.
class report {
public:
  report(const options& o, int world, std::int64_t budget, bool leader)
      : o_(o), leader_(leader),
        tty_(leader && !o.quiet && isatty(fileno(stdout)) != 0), log_{{"world_size", world},
                                                                      {"max_tokens_per_rank",
                                                                       budget},
                                                                      {"steps",
                                                                       nlohmann::json::array()}} {}

  void step(int step, double loss, double loss_count, double tokens, double seconds,
            const dcpp::plan& plan) {
    if (!leader_)
      return;
    std::int32_t largest_cp = 0;
    for (const auto& mb : plan.microbatches)
      for (const auto& g : mb.groups)
        largest_cp = std::max(largest_cp, g.cp);
    log_["steps"].push_back({{"step", step},
                             {"loss", loss},
                             {"loss_tokens", loss_count},
                             {"tokens", tokens},
                             {"seconds", seconds},
                             {"tokens_per_second", tokens / seconds},
                             {"plan_efficiency", plan.metrics.efficiency},
                             {"microbatches", plan.microbatches.size()},
                             {"largest_cp", largest_cp}});
    if (o_.quiet)
      return;
    const int done = (step + 1) * 24 / o_.steps;
    fmt::print("{}[{:<24}] step {:>4}/{}  loss {:.4f}  {:>8.0f} tok/s  plan eff. {:.3f}  "
               "{} micro-batches{}",
               tty_ ? "\r" : "", std::string(static_cast<std::size_t>(done), '='), step + 1,
               o_.steps, loss, tokens / seconds, plan.metrics.efficiency, plan.microbatches.size(),
               tty_ ? "" : "\n");
    std::fflush(stdout);
  }

  //! End of training: the log and the final weights, if asked for.
  void finish(const std::vector<float>& weights) {
    if (!leader_)
      return;
    if (tty_)
      fmt::print("\n");
    if (!o_.log_path.empty()) // staged and renamed into place: no partial log
      dcpp::write_file_atomically(o_.log_path, log_.dump(2) + "\n", "--log");
    if (!o_.weights_path.empty())
      dcpp::write_npy(o_.weights_path, "<f4", {static_cast<std::int64_t>(weights.size())}, weights);
  }

private:
  const options& o_;
  bool leader_, tty_;
  nlohmann::json log_;
};

} // namespace trainer
