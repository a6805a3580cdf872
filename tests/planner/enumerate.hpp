// The fastest plan of a small batch by enumerating every plan: the reference the planner tests
// hold the budget-aware bound's terms against (test_plan.cpp, test_slowest_round.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp_test {
// The fastest plan of a small batch on a few ranks (aligned powers of two, or contiguous), by
// enumerating every plan: each sample in turn joins a round's group (same size, within the
// budget) or opens a group of a legal size in a round (within the world's ranks: powers of two
// in a power-of-two world fit aligned whenever their sum does, any sizes contiguous) or a new
// round. Step time plus overhead per round, as evaluate prices it.
template <class Estimator>
inline double fastest_plan(const dcpp::problem& pr, const Estimator& e) {
  struct group {
    std::int32_t cp;
    std::int64_t tokens;
    double time;
  };
  std::vector<std::vector<group>> rounds; // at most one per sample
  rounds.reserve(pr.size());
  const double overhead = dcpp::microbatch_overhead(pr, e);
  double best = std::numeric_limits<double>::infinity();
  // the longest first, and no partial plan followed past the best (times only grow)
  std::vector<std::size_t> order(pr.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return pr.lengths[a] > pr.lengths[b]; });
  const auto place = [&](const auto& self, std::size_t at) -> void {
    double step = 0;
    for (const auto& r : rounds) {
      double t = 0;
      for (const group& g : r)
        t = std::max(t, g.time);
      step += t + overhead;
    }
    if (step >= best)
      return;
    if (at == pr.size()) {
      best = step;
      return;
    }
    const std::size_t i = order[at];
    const auto try_round = [&](std::vector<group>& r) {
      for (std::size_t k = 0; k < r.size(); ++k)
        if (r[k].cp >= pr.min_cp_of[i] &&
            r[k].tokens + pr.rank_tokens(i, r[k].cp) <= pr.options.max_tokens_per_rank) {
          const group was = r[k];
          r[k].tokens += pr.rank_tokens(i, was.cp);
          r[k].time += dcpp::sample_cost(pr, e, i, was.cp);
          self(self, at + 1);
          r[k] = was;
        }
      std::int32_t used = 0;
      for (const group& g : r)
        used += g.cp;
      for (const std::int32_t cp : pr.cp_sizes)
        if (cp >= pr.min_cp_of[i] && used + cp <= pr.options.world_size) {
          r.push_back({cp, pr.rank_tokens(i, cp), dcpp::sample_cost(pr, e, i, cp)});
          self(self, at + 1);
          r.pop_back();
        }
    };
    for (std::size_t k = 0; k < rounds.size(); ++k)
      try_round(rounds[k]);
    rounds.emplace_back().reserve(4);
    try_round(rounds.back());
    rounds.pop_back();
  };
  place(place, 0);
  return best;
}
} // namespace dcpp_test
