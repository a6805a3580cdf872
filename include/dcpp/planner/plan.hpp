// The plan value type (DESIGN.md section 5) and its canonical form. Evaluation and the lower
// bounds: evaluate.hpp; the cost table: costs.hpp; the hash ranks compare: plan_hash.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dcpp/planner/network.hpp"
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
  std::int32_t min_microbatches = 0; //!< ceil(least total padded tokens / (N*M))
  double microbatch_overhead = 0;    //!< the price of one micro-batch the plan was judged with
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
  //! The network the estimator priced the rings on, when it models one (transformer_cost,
  //! calibrated_cost: `estimator.network()`); recorded in the plan JSON.
  std::optional<network_spec> network;
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

} // namespace dcpp
