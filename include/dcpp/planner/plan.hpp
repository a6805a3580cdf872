// The plan value type, its evaluation under an estimator, the lower bound, and its hash.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "dcpp/core/math.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp {

//! `cp` consecutive ranks `[first_rank, first_rank + cp)` running `samples`, each split over all
//! of them in zigzag chunks. `tokens` and `time` are per rank (every rank of a group carries the
//! same share), filled by `evaluate`.
struct plan_group {
  std::int32_t first_rank = 0;
  std::int32_t cp = 1;
  std::vector<std::int32_t> samples;
  std::int64_t tokens = 0; //!< padded tokens on each rank of the group
  double time = 0;         //!< estimated time on each rank of the group
  friend bool operator==(const plan_group&, const plan_group&) = default;
};

//! One round over the world: disjoint groups; ranks no group covers are idle.
struct plan_microbatch {
  std::vector<plan_group> groups;
  double time = 0;             //!< max over ranks of the estimated time
  std::int32_t idle_ranks = 0; //!< ranks in no group
  friend bool operator==(const plan_microbatch&, const plan_microbatch&) = default;
};

struct plan_metrics {
  double estimated_step_time = 0; //!< sum over micro-batches of (max rank time + overhead)
  double lower_bound = 0;         //!< DESIGN.md section 4 + overheads of the token minimum
  double efficiency = 0;          //!< lower_bound / estimated_step_time
  double plan_seconds = 0;        //!< wall time of the planning call alone
  double max_rank_load = 0;       //!< max over (micro-batch, rank) of the time
  double mean_rank_load = 0;      //!< mean over (micro-batch, rank), idle slots counted as 0
  std::int64_t idle_rank_slots = 0;
  std::int32_t min_microbatches = 0; //!< ceil(total padded tokens at each sample's min cp / (N*M))
  friend bool operator==(const plan_metrics&, const plan_metrics&) = default;
};

//! A plan: for every micro-batch the groups and their samples (DESIGN.md section 5).
struct plan {
  std::int32_t world_size = 0;
  std::int64_t max_tokens_per_rank = 0;
  std::vector<std::int64_t> lengths;
  std::vector<plan_microbatch> microbatches;
  plan_metrics metrics;
  std::string policy;    //!< name of the packing policy that made it (informational)
  std::string estimator; //!< name of the estimator it was evaluated with (informational)
  friend bool operator==(const plan&, const plan&) = default;

  //! Per-rank view of micro-batch `mb`: group index covering each rank, or -1 if idle.
  [[nodiscard]] std::vector<std::int32_t> rank_groups(std::size_t mb) const {
    std::vector<std::int32_t> out(static_cast<std::size_t>(world_size), -1);
    const auto& groups = microbatches[mb].groups;
    for (std::size_t g = 0; g < groups.size(); ++g)
      for (std::int32_t r = groups[g].first_rank; r < groups[g].first_rank + groups[g].cp; ++r)
        if (r >= 0 && r < world_size)
          out[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(g);
    return out;
  }
};

//! Fills `pr.costs` with `estimator.cost(length, cp)` for every distinct length and every legal
//! size at or above its smallest (the sizes any plan may give it), so that planning and
//! evaluation call the estimator once per (length, size). Only while the table stays small
//! enough to live in cache (`max_entries` rows x sizes; measured: 4,096 SFT samples on 64 ranks
//! plan faster with it, and a 65,536 x 11 per-sample table made 65,536 samples on 1,024 ranks
//! slower than calling the transformer model): otherwise `sample_cost` calls the estimator.
//! An estimator may offer `costs(length, sizes, out)` filling a row at once; it must give the
//! bits of `cost` (transformer_cost does, with a fifth of the divisions).
template <workload_estimator Estimator>
void tabulate_costs(problem& pr, const Estimator& estimator, std::size_t max_entries = 1 << 17) {
  const std::size_t levels = pr.cp_sizes.size();
  pr.costs.clear();
  pr.cost_row.clear();
  pr.row_sample.clear();
  if (levels == 0 || pr.size() == 0)
    return;
  // rows by first occurrence of each length: a row per length value when the lengths are short
  // enough for that array to be no larger than a hash table of the samples (typical: lengths up
  // to 32K for 4,096 samples), else open addressing on the length, kept in the slot
  std::size_t slots = 16;
  while (slots < 2 * pr.size())
    slots *= 2;
  struct slot {
    std::int64_t length = -1;
    std::int32_t row = -1;
  };
  std::vector<std::int32_t> row_sample; // the first sample of each row's length
  std::vector<std::int32_t> rows(pr.size());
  const auto new_row = [&](std::size_t s) {
    if ((row_sample.size() + 1) * levels > max_entries)
      return false; // too large to pay: no table
    row_sample.push_back(static_cast<std::int32_t>(s));
    return true;
  };
  const std::int64_t longest = *std::max_element(pr.lengths.begin(), pr.lengths.end());
  if (static_cast<std::uint64_t>(longest) < slots * sizeof(slot) / sizeof(std::int32_t)) {
    std::vector<std::int32_t> row_of(static_cast<std::size_t>(longest) + 1, -1);
    for (std::size_t s = 0; s < pr.size(); ++s) {
      DCPP_EXPECTS(pr.lengths[s] >= 0);
      std::int32_t& row = row_of[static_cast<std::size_t>(pr.lengths[s])];
      if (row < 0) {
        if (!new_row(s))
          return;
        row = static_cast<std::int32_t>(row_sample.size() - 1);
      }
      rows[s] = row;
    }
  } else {
    std::vector<slot> table(slots);
    for (std::size_t s = 0; s < pr.size(); ++s) {
      const std::int64_t length = pr.lengths[s];
      const auto key = static_cast<std::uint64_t>(length);
      std::size_t h = static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> 20) & (slots - 1);
      while (table[h].row >= 0 && table[h].length != length)
        h = (h + 1) & (slots - 1);
      if (table[h].row < 0) {
        if (!new_row(s))
          return;
        table[h] = {length, static_cast<std::int32_t>(row_sample.size() - 1)};
      }
      rows[s] = table[h].row;
    }
  }
  pr.costs.assign(row_sample.size() * levels, std::numeric_limits<double>::quiet_NaN());
  const std::span<const std::int32_t> sizes(pr.cp_sizes);
  for (std::size_t r = 0; r < row_sample.size(); ++r) {
    const auto s = static_cast<std::size_t>(row_sample[r]);
    // the sizes at or above the smallest: from its level on (sizes ascend)
    const auto first =
        static_cast<std::size_t>(pr.level_of_cp[static_cast<std::size_t>(pr.min_cp_of[s])]);
    double* row = pr.costs.data() + r * levels;
    if constexpr (requires(std::span<double> out) { estimator.costs(pr.lengths[s], sizes, out); }) {
      estimator.costs(pr.lengths[s], sizes.subspan(first),
                      std::span<double>(row + first, levels - first));
    } else {
      for (std::size_t l = first; l < levels; ++l)
        row[l] = static_cast<double>(estimator.cost(pr.lengths[s], pr.cp_sizes[l]));
    }
  }
  pr.cost_row = std::move(rows);
  pr.row_sample = std::move(row_sample);
}

namespace detail {
//! The column of `cp` in the problem's cost table, -1 without a table or for a size that is not
//! legal (a plan under validation).
inline std::int32_t cost_column(const problem& pr, std::int32_t cp) noexcept {
  const auto ucp = static_cast<std::size_t>(cp);
  return pr.costs.empty() || ucp >= pr.level_of_cp.size() ? -1 : pr.level_of_cp[ucp];
}
//! `sample_cost` with `column = cost_column(pr, cp)` given (loops over one size look it up once).
template <workload_estimator Estimator>
double sample_cost_in(const problem& pr, const Estimator& estimator, std::size_t s, std::int32_t cp,
                      std::int32_t column) {
  if (column < 0 || cp < pr.min_cp_of[s]) // not tabulated: the estimator
    return static_cast<double>(estimator.cost(pr.lengths[s], cp));
  return pr.cost_row_of(s)[column];
}
} // namespace detail

//! `estimator.cost(length of sample s, cp)`, from the problem's table when it holds the entry.
template <workload_estimator Estimator>
inline double sample_cost(const problem& pr, const Estimator& estimator, std::size_t s,
                          std::int32_t cp) {
  return detail::sample_cost_in(pr, estimator, s, cp, detail::cost_column(pr, cp));
}

//! Sorts groups by first rank and each group's samples ascending: the canonical form that makes
//! equal plans byte-identical.
inline void canonicalize(plan& p) {
  const auto by_first_rank = [](const plan_group& a, const plan_group& b) {
    return a.first_rank < b.first_rank;
  };
  for (auto& mb : p.microbatches) {
    for (auto& g : mb.groups)
      if (!std::is_sorted(g.samples.begin(), g.samples.end()))
        std::sort(g.samples.begin(), g.samples.end());
    if (!std::is_sorted(mb.groups.begin(), mb.groups.end(), by_first_rank))
      std::sort(mb.groups.begin(), mb.groups.end(), by_first_rank);
  }
}

//! Fewest micro-batches any plan needs: total padded tokens (each sample at its smallest cp)
//! over the world's token capacity, rounded up to the micro-batch multiple.
inline std::int32_t min_microbatches(const problem& pr) {
  std::int64_t rank_tokens = 0;
  for (std::size_t i = 0; i < pr.size(); ++i)
    rank_tokens += pr.rank_tokens(i, pr.min_cp_of[i]) * pr.min_cp_of[i];
  const std::int64_t capacity =
      std::int64_t{pr.options.world_size} * pr.options.max_tokens_per_rank;
  const auto k =
      static_cast<std::int32_t>(std::max<std::int64_t>(1, ceil_div(rank_tokens, capacity)));
  return round_up(k, pr.options.microbatch_multiple);
}

namespace detail {
//! `lower_bound` with the fewest micro-batches `k_min` (= min_microbatches(pr)) given.
template <workload_estimator Estimator>
double lower_bound(const problem& pr, const Estimator& estimator, std::int32_t k_min) {
  const std::size_t levels = pr.cp_sizes.size();
  // (least rank area, least time) of sample i over its feasible sizes
  const auto best_of = [&](std::size_t i, const double* row) {
    double best_area = std::numeric_limits<double>::infinity();
    double best_time = std::numeric_limits<double>::infinity();
    for (std::size_t l = 0; l < levels; ++l) {
      const std::int32_t cp = pr.cp_sizes[l];
      if (cp < pr.min_cp_of[i])
        continue;
      const double t =
          row == nullptr ? static_cast<double>(estimator.cost(pr.lengths[i], cp)) : row[l];
      best_area = std::min(best_area, t * cp);
      best_time = std::min(best_time, t);
    }
    return std::pair(best_area, best_time);
  };
  double area = 0;
  double longest = 0;
  if (pr.costs.empty()) {
    for (std::size_t i = 0; i < pr.size(); ++i) {
      const auto [a, t] = best_of(i, nullptr);
      area += a;
      longest = std::max(longest, t);
    }
  } else {
    // once per row (samples of one length share it), summed in sample order as above
    std::vector<double> row_area(pr.row_sample.size());
    for (std::size_t r = 0; r < pr.row_sample.size(); ++r) {
      const auto first = static_cast<std::size_t>(pr.row_sample[r]);
      const auto [a, t] = best_of(first, pr.cost_row_of(first));
      row_area[r] = a;
      longest = std::max(longest, t);
    }
    for (const std::int32_t row : pr.cost_row)
      area += row_area[static_cast<std::size_t>(row)];
  }
  return std::max(area / pr.options.world_size, longest) + k_min * microbatch_overhead(estimator);
}
} // namespace detail

//! `LB = max( sum_i min_c c*cost(L_i,c) / N , max_i min_c cost(L_i,c) )` over the feasible c,
//! plus the estimator's micro-batch overhead for the fewest micro-batches any plan needs.
template <workload_estimator Estimator>
double lower_bound(const problem& pr, const Estimator& estimator) {
  return detail::lower_bound(pr, estimator, min_microbatches(pr));
}

//! A lower bound that also counts the token budget (DESIGN.md's `lower_bound` ignores it), for
//! judging how much of a gap any plan could close; always >= `lower_bound`.
//! Heavy samples (smallest legal CP size above half the world, and more than half the budget
//! per rank even on the largest legal group) cannot share a round: not in two groups (too many
//! ranks) nor in one (too many tokens). So each holds a round of time >= its cost `w_h` on all
//! N ranks. The other N - c_h ranks of that round can only be filled by light samples whose
//! rank-tokens fit their (N - c_h) * M budget, and a light sample there takes at most its least
//! rank area out of the other rounds. So, with
//! `A_light` the least areas of the light samples and `KS(C)` the most least-area that light
//! samples of at most C rank-tokens carry (fractional knapsack, least rank-tokens per sample):
//!   N * sum_k T_k >= sum_h N w_h + A_light - min(KS(sum_h (N - c_h) M), sum_h (N - c_h) w_h)
//! (each heavy sample at its cheapest size for the first sum and its smallest for the rest: a
//! valid relaxation of the choice of sizes), and every plan has at least max(token minimum,
//! heavy samples) rounds of overhead. Without heavy samples it equals `lower_bound`.
template <workload_estimator Estimator>
double budget_lower_bound(const problem& pr, const Estimator& estimator) {
  const std::int32_t world = pr.options.world_size;
  const std::int32_t largest = pr.cp_sizes.empty() ? 1 : pr.cp_sizes.back();
  const auto is_heavy = [&](std::size_t i) {
    return 2 * std::int64_t{pr.min_cp_of[i]} > world &&
           2 * pr.rank_tokens(i, largest) > pr.options.max_tokens_per_rank;
  };
  const double n = world;
  const double budget = static_cast<double>(pr.options.max_tokens_per_rank);
  double heavy_time = 0;  // sum_h N * min_c w_h(c)
  double free_time = 0;   // sum_h max_c (N - c) w_h(c)
  double free_tokens = 0; // sum_h (N - min_cp_h) * M
  double light_area = 0;  // A_light
  double area = 0;        // every sample's least area, and the longest least time: lower_bound
  double longest = 0;
  std::size_t heavy = 0;
  struct item {
    double density; // least area per least rank-tokens
    double tokens;
    std::size_t id;
  };
  std::vector<item> light;
  for (std::size_t i = 0; i < pr.size(); ++i) {
    double least_area = std::numeric_limits<double>::infinity();
    double least_time = std::numeric_limits<double>::infinity();
    double most_free = 0;
    double least_tokens = std::numeric_limits<double>::infinity();
    for (const std::int32_t cp : pr.cp_sizes) {
      if (cp < pr.min_cp_of[i])
        continue;
      const double w = sample_cost(pr, estimator, i, cp);
      least_area = std::min(least_area, w * cp);
      least_time = std::min(least_time, w);
      most_free = std::max(most_free, (n - cp) * w);
      least_tokens = std::min(least_tokens, static_cast<double>(pr.rank_tokens(i, cp)) * cp);
    }
    area += least_area;
    longest = std::max(longest, least_time);
    if (is_heavy(i)) {
      ++heavy;
      heavy_time += n * least_time;
      free_time += most_free;
      free_tokens += (n - pr.min_cp_of[i]) * budget;
    } else {
      light_area += least_area;
      light.push_back({least_area / least_tokens, least_tokens, i});
    }
  }
  double carried = 0; // KS(free_tokens)
  if (heavy > 0) {
    std::sort(light.begin(), light.end(), [](const item& a, const item& b) {
      return a.density != b.density ? a.density > b.density : a.id < b.id;
    });
    double capacity = free_tokens;
    for (const item& it : light) {
      if (capacity <= 0)
        break;
      const double take = std::min(it.tokens, capacity);
      carried += it.density * take;
      capacity -= take;
    }
  }
  const double overhead = microbatch_overhead(estimator);
  const std::int32_t k_min = min_microbatches(pr);
  // without heavy samples every term is lower_bound's (the same sums in the same order)
  const double work_bound =
      heavy == 0 ? 0.0 : (heavy_time + light_area - std::min(carried, free_time)) / n;
  return std::max({area / n, longest, work_bound}) +
         static_cast<double>(std::max<std::size_t>(static_cast<std::size_t>(k_min), heavy)) *
             overhead;
}

//! Fills every group's tokens and time, every micro-batch's time and idle ranks, and the metrics
//! (all but plan_seconds) under `estimator`.
template <workload_estimator Estimator>
void evaluate(plan& p, const problem& pr, const Estimator& estimator) {
  double step = 0;
  double load_sum = 0;
  double load_max = 0;
  std::int64_t idle = 0;
  for (auto& mb : p.microbatches) {
    mb.time = 0;
    std::int32_t covered = 0;
    for (auto& g : mb.groups) {
      g.tokens = 0;
      g.time = 0;
      const std::int32_t column = detail::cost_column(pr, g.cp); // once for its samples
      for (const std::int32_t s : g.samples) {
        const auto us = static_cast<std::size_t>(s);
        g.tokens += pr.rank_tokens(us, g.cp);
        g.time += detail::sample_cost_in(pr, estimator, us, g.cp, column);
      }
      mb.time = std::max(mb.time, g.time);
      load_sum += g.time * g.cp;
      covered += g.cp;
    }
    mb.idle_ranks = p.world_size - covered;
    idle += mb.idle_ranks;
    step += mb.time;
    load_max = std::max(load_max, mb.time);
  }
  step += static_cast<double>(p.microbatches.size()) * microbatch_overhead(estimator);
  p.metrics.estimated_step_time = step;
  const std::int32_t k_min = min_microbatches(pr);
  p.metrics.lower_bound = detail::lower_bound(pr, estimator, k_min);
  p.metrics.efficiency = step > 0 ? p.metrics.lower_bound / step : 1.0;
  p.metrics.max_rank_load = load_max;
  const double slots = static_cast<double>(p.microbatches.size()) * p.world_size;
  p.metrics.mean_rank_load = slots > 0 ? load_sum / slots : 0.0;
  p.metrics.idle_rank_slots = idle;
  p.metrics.min_microbatches = k_min;
}

//! 64-bit FNV-1a over the plan's canonical integer content (world, budget, lengths, groups).
//! Ranks compare it collectively to prove they computed the same plan.
inline std::uint64_t plan_hash(const plan& p) {
  fnv1a h;
  auto mix = [&h](std::int64_t value) { h.mix(value); };
  mix(p.world_size);
  mix(p.max_tokens_per_rank);
  mix(static_cast<std::int64_t>(p.lengths.size()));
  for (const auto l : p.lengths)
    mix(l);
  mix(static_cast<std::int64_t>(p.microbatches.size()));
  for (const auto& mb : p.microbatches) {
    mix(static_cast<std::int64_t>(mb.groups.size()));
    for (const auto& g : mb.groups) {
      mix(g.first_rank);
      mix(g.cp);
      mix(static_cast<std::int64_t>(g.samples.size()));
      for (const auto s : g.samples)
        mix(s);
    }
  }
  return h.value();
}

} // namespace dcpp
