// The regimes where dcpp's plans lagged (issue 61): medium samples on a tight budget (a
// ProLong-like mix), 16 samples per rank at 1,024 ranks, and a 64K-128K tail on 256 ranks; and a
// reference planner written from the one-line description, the benchmark's baseline
// column beside megatron_greedy: global longest-first over K micro-batches on aligned
// power-of-two groups, trying a doubled CP size for the heaviest samples (from 1% of them to all),
// with three placement rules.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dcpp/dcpp.hpp"
#include "dcpp/workload/generators.hpp"
#include "planner_cases.hpp"

namespace dcpp_bench {

//! ProLong-like: log-normal, median 2.3K and p90 about 5.6K; 1.5% log-uniform in 8K..60K (p99
//! about 15K); one sample of 75K.
inline std::vector<std::int64_t> prolong_like(std::size_t n, std::uint64_t seed) {
  dcpp::workload::rng r(seed);
  std::vector<std::int64_t> out(n);
  for (auto& l : out) {
    if (r.uniform() < 0.015)
      l = dcpp::workload::clamp_length(
          std::exp(std::log(8192.0) + r.uniform() * std::log(60.0 / 8)), 8192, 61440);
    else
      l = dcpp::workload::clamp_length(std::exp(std::log(2300.0) + 0.7 * r.normal()), 64, 16384);
  }
  out[seed % n] = 76800;
  return out;
}

//! Dense: log-normal, median 2K, p99 about 32K, capped at 128K; one sample of 128K.
inline std::vector<std::int64_t> dense_mix(std::size_t n, std::uint64_t seed) {
  dcpp::workload::rng r(seed);
  std::vector<std::int64_t> out(n);
  for (auto& l : out)
    l = dcpp::workload::clamp_length(std::exp(std::log(2048.0) + 1.19 * r.normal()), 64, 131072);
  out[seed % n] = 131072;
  return out;
}

//! A long tail: short samples (log-normal, median 1.5K) and 3% log-uniform in 64K..128K.
inline std::vector<std::int64_t> tail_64k_128k(std::size_t n, std::uint64_t seed) {
  dcpp::workload::rng r(seed);
  std::vector<std::int64_t> out(n);
  for (auto& l : out) {
    if (r.uniform() < 0.03)
      l = dcpp::workload::clamp_length(std::exp(std::log(65536.0) + r.uniform() * std::log(2.0)),
                                       65536, 131072);
    else
      l = dcpp::workload::clamp_length(std::exp(std::log(1536.0) + 0.9 * r.normal()), 64, 16384);
  }
  return out;
}

//! The regime family: each regime at `seeds` seeds.
inline std::vector<planner_case> regime_cases(int seeds) {
  std::vector<planner_case> cases;
  for (std::uint64_t seed = 1; seed <= static_cast<std::uint64_t>(seeds); ++seed) {
    const std::string s = fmt::format("/s{}", seed);
    cases.push_back({"prolong/128" + s, prolong_like(2048, seed), make_options(128, 16384)});
    cases.push_back({"dense16/1024" + s, dense_mix(16384, seed), make_options(1024, 8192)});
    cases.push_back({"tail64k/256" + s, tail_64k_128k(4096, seed), make_options(256, 16384)});
  }
  return cases;
}

//! A two-tier cluster as a transformer_cost: `model` on H100s in nodes of `gpus_per_node`, the ring
//! at `intra_gbps` GB/s inside a node and `inter_gbps` GB/s beyond.
inline dcpp::transformer_cost two_tier_cost(const dcpp::model_shape& model,
                                            std::int32_t gpus_per_node, double intra_gbps,
                                            double inter_gbps) {
  dcpp::device_spec device = dcpp::device_presets[0];
  device.network.gpus_per_node = gpus_per_node;
  device.network.intra_node.bytes_per_second = intra_gbps * 1e9;
  device.network.inter_node.bytes_per_second = inter_gbps * 1e9;
  return dcpp::transformer_cost(model, device);
}

//! The two-tier cluster the issue judges with: llama3-8b, H100s, NVLink at 450 GB/s inside a
//! node of 8, InfiniBand at 50 GB/s beyond.
inline dcpp::transformer_cost two_tier_cost() {
  return two_tier_cost(dcpp::model_presets[0], 8, 450, 50);
}

//! A ring that hides less than transformer_cost's: a share `exposed` of each ring step's message
//! time (latency and transfer) stays exposed however much attention runs beside it, the rest
//! hides behind the step's attention as there (`exposed` 0: transformer_cost's price up to
//! rounding; 1: no overlap at all). Linear layers and attention as in `base`. A cost of a shape
//! the planner's presets and the calibration's exposure form do not have: how far the plans'
//! quality carries to a cluster dcpp does not model.
class partly_hidden_cost {
public:
  partly_hidden_cost(const dcpp::transformer_cost& base, double exposed)
      : base_(base), exposed_(exposed) {
    const dcpp::model_shape& m = base.model();
    attention_per_token2_ = 2.0 * m.query_width() * m.layers / base.device().attention_flops;
    kv_bytes_per_token_ = 2.0 * m.kv_width() * base.device().bytes_per_element;
  }
  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const {
    const double l = static_cast<double>(length);
    const double c = static_cast<double>(cp);
    const double compute = base_.cost(length, 1) / c; // linear and attention, spread evenly
    if (cp <= 1)
      return compute;
    const double layers = base_.model().layers;
    const double step_compute = attention_per_token2_ * l * l / (c * c * layers);
    const dcpp::link_tier& link = base_.network().tier(cp);
    const double transfer = kv_bytes_per_token_ * l / c / link.bytes_per_second;
    const auto exposed = [&](double message, double hiding) {
      return std::max(exposed_ * message, message - hiding);
    };
    return compute + (c - 1.0) * layers *
                         (exposed(link.latency + transfer, step_compute) +
                          exposed(link.latency + 2.0 * transfer, 2.5 * step_compute));
  }
  [[nodiscard]] double microbatch_overhead() const noexcept { return base_.microbatch_overhead(); }
  [[nodiscard]] const dcpp::network_spec& network() const noexcept { return base_.network(); }
  [[nodiscard]] std::string name() const {
    return fmt::format("{}, ring {:g} exposed", base_.name(), exposed_);
  }

private:
  dcpp::transformer_cost base_;
  double exposed_;
  double attention_per_token2_; // forward attention seconds per token^2, over the layers
  double kv_bytes_per_token_;   // one ring step's K and V per token
};

//! A calibration of `truth` as issue 61 measured one: its timings at every power-of-two length
//! from 256 to 256K on every power-of-two group of 1 to 256 ranks that gives a rank 64 tokens or
//! more (78 rows), and its micro-batch overhead.
template <class Truth>
std::vector<dcpp::calibration_row> calibration_rows_of(const Truth& truth) {
  std::vector<dcpp::calibration_row> rows;
  for (std::int64_t l = 256; l <= 262144; l *= 2)
    for (std::int32_t cp = 1; cp <= 256; cp *= 2)
      if (l / cp >= 64)
        rows.push_back({l, cp, truth.cost(l, cp), false});
  rows.push_back({0, 0, truth.microbatch_overhead(), true});
  return rows;
}
template <class Truth>
dcpp::calibrated_cost calibration_of(const Truth& truth) {
  return dcpp::calibrated_cost::fit(calibration_rows_of(truth), truth.network().gpus_per_node);
}
//! The same calibration's fit in the hinge form alone (as every fit was before the exposure form).
inline dcpp::calibrated_cost hinge_calibration_of(const dcpp::transformer_cost& truth) {
  return dcpp::calibrated_cost::fit_hinges(calibration_rows_of(truth),
                                           truth.network().gpus_per_node);
}

namespace detail_reference {

//! Where a deal puts each sample, among the open groups of its size with token room and a new
//! group on free ranks, in every round: where it leaves the smallest round maximum; or where it
//! raises its round's maximum least (the rounds fill one after another, the costliest samples
//! first); or where it leaves the least load (longest processing time over every round's
//! groups). Ties go to the least load, then the earlier round.
enum class placement : std::uint8_t { least_max, least_rise, least_load };

//! One deal of the reference rule: `k` rounds, sample i on size `sizes[i]`, samples in `order`,
//! each placed by `rule`. With `quotas`, a round opens groups of a size on at most the size's
//! share of the batch's rank tokens of its ranks (in whole groups), unless the sample fits
//! nowhere else: without them, the first samples of a size open groups on every free rank, and
//! the samples of the other sizes find none. None when a sample fits nowhere.
template <class Estimator>
std::optional<dcpp::plan> deal(const dcpp::problem& pr, const Estimator& estimator, std::size_t k,
                               const std::vector<std::int32_t>& sizes,
                               const std::vector<std::size_t>& order, placement rule, bool quotas) {
  const dcpp::plan_options& o = pr.options;
  std::vector<dcpp::detail::microbatch_state> rounds;
  rounds.reserve(k);
  for (std::size_t r = 0; r < k; ++r)
    rounds.emplace_back(o.world_size);
  std::vector<double> top(k, 0.0);
  // per round and size, the open groups by (load, index)
  // and their token rooms (a round where none has room for a sample is not scanned)
  struct open_groups {
    std::set<std::pair<double, std::int32_t>> by_load;
    std::multiset<std::int64_t> rooms;
  };
  std::vector<std::map<std::int32_t, open_groups>> open(k);
  // per size, the fewest tokens per rank of a sample on it: a group with less room is full
  std::map<std::int32_t, std::int64_t> least_tokens;
  for (const std::size_t i : order) {
    const std::int64_t t = pr.rank_tokens(i, sizes[i]);
    if (const auto [it, added] = least_tokens.emplace(sizes[i], t); !added)
      it->second = std::min(it->second, t);
  }
  std::map<std::int32_t, std::int64_t> quota; // ranks per round, per size
  std::vector<std::map<std::int32_t, std::int64_t>> opened(k);
  if (quotas) {
    std::map<std::int32_t, double> tokens;
    double total = 0;
    for (const std::size_t i : order) {
      const double t = static_cast<double>(pr.rank_tokens(i, sizes[i]) * sizes[i]);
      tokens[sizes[i]] += t;
      total += t;
    }
    for (const auto& [cp, t] : tokens)
      quota[cp] = static_cast<std::int64_t>(std::ceil(t / total * o.world_size / cp)) * cp;
  }
  for (const std::size_t i : order) {
    const std::int32_t cp = sizes[i];
    const std::int64_t tokens = pr.rank_tokens(i, cp);
    const double cost = dcpp::sample_cost(pr, estimator, i, cp);
    double best_key = std::numeric_limits<double>::infinity(), best_load = 0;
    std::size_t best_round = k;
    std::int32_t best_group = -1; // -1: a new group
    const auto offer = [&](std::size_t r, std::int32_t g, double load) {
      const double m = std::max(top[r], load);
      const double key = rule == placement::least_max    ? m
                         : rule == placement::least_rise ? m - top[r]
                                                         : load;
      if (key < best_key || (key == best_key && load < best_load))
        best_key = key, best_load = load, best_round = r, best_group = g;
    };
    for (const bool within_quota : {true, false}) {
      for (std::size_t r = 0; r < k; ++r) {
        if (within_quota) // the least-loaded open group with room (the others leave more load)
          if (const auto it = open[r].find(cp); it != open[r].end() && !it->second.rooms.empty() &&
                                                *it->second.rooms.rbegin() >= tokens)
            for (const auto& [load, g] : it->second.by_load)
              if (rounds[r].groups()[static_cast<std::size_t>(g)].tokens + tokens <=
                  o.max_tokens_per_rank) {
                offer(r, g, load + cost);
                break;
              }
        if ((!quotas || !within_quota || opened[r][cp] + cp <= quota[cp]) &&
            rounds[r].free_block(o, cp))
          offer(r, -1, cost);
      }
      if (best_round < k || !quotas)
        break; // (past its quota a round opens a group only where the sample fits nowhere)
    }
    if (best_round == k)
      return std::nullopt;
    auto& round = rounds[best_round];
    std::int32_t g = best_group;
    if (g < 0) {
      g = round.open(round.free_block(o, cp).value(), cp);
      opened[best_round][cp] += cp;
    } else {
      const auto& group = round.groups()[static_cast<std::size_t>(g)];
      open_groups& of = open[best_round][cp];
      of.by_load.erase({group.load, g});
      of.rooms.erase(of.rooms.find(o.max_tokens_per_rank - group.tokens));
    }
    round.add(g, static_cast<std::int32_t>(i), tokens, cost);
    const auto& group = round.groups()[static_cast<std::size_t>(g)];
    const double load = group.load;
    if (group.tokens + least_tokens[cp] <= o.max_tokens_per_rank) {
      open[best_round][cp].by_load.emplace(load, g); // else no sample fits it: not scanned again
      open[best_round][cp].rooms.insert(o.max_tokens_per_rank - group.tokens);
    }
    top[best_round] = std::max(top[best_round], load);
  }
  std::erase_if(rounds, [](const dcpp::detail::microbatch_state& r) { return r.groups().empty(); });
  return dcpp::detail::to_plan(pr, "reference", rounds);
}

} // namespace detail_reference

//! The reference rule: for none, 1%, 5%, 10%, 25%, 50% and all of the samples (the costliest) on
//! twice their smallest legal size, each placement rule with and without rank quotas, and K
//! from the fewest rounds the tokens allow (in steps of the micro-batch multiple, up to twice
//! that, until a K's plan is slower than the one before), the global longest-first deal above
//! (the samples by size, largest first, then by cost); the fastest plan under `estimator`.
//! Aligned topology: every size a power of two at an aligned first rank.
template <class Estimator>
dcpp::plan reference_plan(const dcpp::problem& pr, const Estimator& estimator) {
  using detail_reference::placement;
  const std::size_t n = pr.size();
  std::vector<std::int32_t> smallest(n);
  std::int64_t rank_tokens = 0;
  for (std::size_t i = 0; i < n; ++i) {
    smallest[i] = pr.min_cp_of[i];
    rank_tokens += pr.rank_tokens(i, smallest[i]) * smallest[i];
  }
  const std::int64_t capacity =
      std::int64_t{pr.options.world_size} * pr.options.max_tokens_per_rank;
  const auto multiple = static_cast<std::size_t>(pr.options.microbatch_multiple);
  std::size_t k_min = static_cast<std::size_t>((rank_tokens + capacity - 1) / capacity);
  k_min = (std::max<std::size_t>(k_min, 1) + multiple - 1) / multiple * multiple;
  const std::int32_t largest = pr.cp_sizes.empty() ? 1 : pr.cp_sizes.back();
  std::optional<dcpp::plan> best;
  double best_step = std::numeric_limits<double>::infinity();
  // the samples by their cost on their smallest size, the costliest first (the doubled ones)
  std::vector<double> cost_at_smallest(n);
  for (std::size_t i = 0; i < n; ++i)
    cost_at_smallest[i] = dcpp::sample_cost(pr, estimator, i, smallest[i]);
  std::vector<std::size_t> by_cost(n);
  std::iota(by_cost.begin(), by_cost.end(), std::size_t{0});
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](std::size_t a, std::size_t b) {
    return cost_at_smallest[a] > cost_at_smallest[b];
  });
  for (const double doubled : {0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0}) {
    std::vector<std::int32_t> sizes = smallest;
    const auto heavy = static_cast<std::size_t>(std::ceil(doubled * static_cast<double>(n)));
    for (std::size_t h = 0; h < heavy; ++h)
      sizes[by_cost[h]] = std::min(2 * sizes[by_cost[h]], largest);
    std::vector<double> cost(n);
    for (std::size_t i = 0; i < n; ++i)
      cost[i] = dcpp::sample_cost(pr, estimator, i, sizes[i]);
    // the largest groups first: placed after smaller ones, they would find the ranks in pieces
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return sizes[a] != sizes[b] ? sizes[a] > sizes[b] : cost[a] > cost[b];
    });
    for (const placement rule :
         {placement::least_max, placement::least_rise, placement::least_load})
      for (const bool quotas : {false, true}) {
        double previous = std::numeric_limits<double>::infinity();
        for (std::size_t k = k_min; k <= 2 * k_min; k += multiple) {
          std::optional<dcpp::plan> p =
              detail_reference::deal(pr, estimator, k, sizes, order, rule, quotas);
          if (!p)
            continue;
          dcpp::evaluate(*p, pr, estimator);
          const double step = p->metrics.estimated_step_time;
          if (p->microbatches.size() % multiple == 0 && step < best_step) {
            best_step = step;
            best = std::move(p);
          }
          if (!(step < previous))
            break;
          previous = step;
        }
      }
  }
  if (!best)
    throw dcpp::error(dcpp::status_code::invalid_plan, "reference rule: no deal fits the batch");
  return *best;
}

} // namespace dcpp_bench
