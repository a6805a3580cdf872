// The slowest-round term of `budget_lower_bound` (docs/bounds.md sections 5 and 6): in a plan's
// slowest round, of time tau, every sample sits on a size no slower than tau, and what the
// round's samples leave of its N x tau rank time, by their tokens or by their groups, is paid on
// top of the least areas.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "dcpp/planner/bounds/gap.hpp"
#include "dcpp/planner/bounds/whole_groups.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp::detail {

//! The slowest-round term's two values, each (A + the least charge over tau) / N before the
//! micro-batch overhead: `fluid` fills the slowest round by rank-tokens alone, `whole` keeps its
//! groups whole as well (never below `fluid`). Proofs: docs/bounds.md sections 5 and 6.
struct slowest_round_terms {
  double fluid = 0;
  double whole = 0;
};

//! From `time` on, the least area of length `length` (row `row`) below tau is `area`.
struct slowest_round_step {
  double time;
  double area;
  std::int64_t length;
  std::size_t row;
};

//! What the sweep of `slowest_round_bounds` reads: per length its steps (by time, each of less
//! area than the one before) and its least rank-tokens, `floor` the least time every length
//! reaches, and where `whole_groups` every length's time and rank-tokens per size (infinite where
//! not legal). Empty where a length has no legal size or no tokens: the term then says nothing.
struct slowest_round_steps {
  std::vector<slowest_round_step> steps;
  std::vector<double> tokens;
  std::vector<double> time_at, rank_tokens_at;
  double floor = 0;
};

template <workload_estimator Estimator>
std::optional<slowest_round_steps>
make_slowest_round_steps(const problem& pr, const Estimator& estimator,
                         std::span<const std::int32_t> first_of, bool whole_groups) {
  const std::size_t rows = first_of.size();
  const std::size_t size_count = pr.cp_sizes.size();
  const std::size_t entries = whole_groups ? rows * size_count : 0;
  slowest_round_steps out;
  out.tokens.assign(rows, std::numeric_limits<double>::infinity());
  out.time_at.assign(entries, std::numeric_limits<double>::infinity());
  out.rank_tokens_at.assign(entries, std::numeric_limits<double>::infinity());
  std::vector<std::pair<double, double>> sizes; // (time, area) of one length
  for (std::size_t r = 0; r < rows; ++r) {
    const auto first = static_cast<std::size_t>(first_of[r]);
    sizes.clear();
    for (std::size_t s = 0; s < size_count; ++s) {
      const std::int32_t cp = pr.cp_sizes[s];
      if (cp >= pr.min_cp_of[first]) {
        const double w = sample_cost(pr, estimator, first, cp);
        const auto per_rank = static_cast<double>(pr.rank_tokens(first, cp));
        sizes.emplace_back(w, w * cp);
        out.tokens[r] = std::min(out.tokens[r], per_rank * cp);
        if (whole_groups) {
          out.time_at[r * size_count + s] = w;
          out.rank_tokens_at[r * size_count + s] = per_rank;
        }
      }
    }
    if (sizes.empty())
      return std::nullopt;
    std::sort(sizes.begin(), sizes.end());
    out.floor = std::max(out.floor, sizes.front().first);
    double least = std::numeric_limits<double>::infinity();
    for (const auto& [w, a] : sizes)
      if (a < least) {
        least = a;
        out.steps.push_back({w, a, pr.lengths[first], r});
      }
  }
  if (std::ranges::any_of(out.tokens, [](double t) { return !(t > 0); }))
    return std::nullopt;
  return out;
}

//! A fractional knapsack whose items change: a Fenwick tree of tokens and areas over positions
//! 1..n in knapsack order (densest first), so that `carried(capacity)`, the densest areas whose
//! tokens fit `capacity` (the last in part), is one descent.
class fenwick_knapsack {
public:
  explicit fenwick_knapsack(std::size_t n)
      : n_(n), top_(std::bit_floor(n)), tree_tokens_(n + 1, 0.0), tree_area_(n + 1, 0.0),
        at_tokens_(n + 1, 0.0), at_area_(n + 1, 0.0) {}

  //! Adds `tokens` and `area` (either may be negative) at position `pos` (from 1).
  void add(std::size_t pos, double tokens, double area) {
    at_tokens_[pos] += tokens;
    at_area_[pos] += area;
    for (; pos <= n_; pos += pos & (~pos + 1)) {
      tree_tokens_[pos] += tokens;
      tree_area_[pos] += area;
    }
  }

  [[nodiscard]] double carried(double capacity) const {
    std::size_t pos = 0;
    double t = 0;
    double a = 0;
    for (std::size_t half = top_; half > 0; half /= 2)
      if (pos + half <= n_ && t + tree_tokens_[pos + half] <= capacity) {
        pos += half;
        t += tree_tokens_[pos];
        a += tree_area_[pos];
      }
    for (std::size_t next = pos + 1; next <= n_; ++next) // the next position that holds tokens
      if (at_tokens_[next] > 0)
        return a + at_area_[next] * (capacity - t) / at_tokens_[next];
    return a;
  }

private:
  std::size_t n_, top_;
  std::vector<double> tree_tokens_, tree_area_;
  std::vector<double> at_tokens_, at_area_; // what each position holds now
};

//! The slowest-round term of `budget_lower_bound` (docs/bounds.md section 5), before the
//! micro-batch overhead: `fluid`, min over tau of (A + sum_i past_i(tau) + max(0, N tau -
//! KS_tau(N M))) / N, tau from the least time every sample can reach, and `whole`, the same with
//! each tau's charge also at least the whole-group charge (`whole_group_rows`, section 6).
//! `lengths`: the batch's rows with their counts and least areas (`make_gap_rows`, or
//! `budget_lower_bound`'s own), `total` their least areas summed. Per length, its area below tau
//! falls in steps as tau passes the times of its sizes; tau is swept over those times once, each
//! length's current area kept in a Fenwick tree over every (length, step) in knapsack order, so
//! that KS is one descent: O(P log P) for P steps (lengths x legal sizes at most). Ties are
//! broken by length, never by row number, so the sums come out the same with or without the
//! problem's cost rows.
template <workload_estimator Estimator>
slowest_round_terms slowest_round_bounds(const problem& pr, const Estimator& estimator,
                                         const gap_rows& lengths, double total,
                                         double work_limit = whole_group_rows::most_work) {
  const std::span<const std::int32_t> first_of = lengths.first_of;
  const std::size_t rows = first_of.size();
  if (rows == 0)
    return {};
  const double world = pr.options.world_size;
  const double capacity = world * static_cast<double>(pr.options.max_tokens_per_rank);
  const std::size_t size_count = pr.cp_sizes.size();
  const bool whole_groups =
      size_count <= gap_bound_most_sizes && rows * size_count <= whole_group_rows::most_entries;
  const std::optional<slowest_round_steps> made =
      make_slowest_round_steps(pr, estimator, first_of, whole_groups);
  if (!made)
    return {};
  const std::vector<slowest_round_step>& steps = made->steps;
  const std::vector<double>& tokens = made->tokens;
  // the steps in knapsack order (most area per least rank-token first), each one's place there
  const std::size_t n = steps.size();
  std::vector<std::size_t> by_density(n);
  for (std::size_t k = 0; k < n; ++k)
    by_density[k] = k;
  std::sort(by_density.begin(), by_density.end(), [&](std::size_t x, std::size_t y) {
    const double dx = steps[x].area / tokens[steps[x].row];
    const double dy = steps[y].area / tokens[steps[y].row];
    if (dx != dy)
      return dx > dy;
    return steps[x].length != steps[y].length ? steps[x].length < steps[y].length
                                              : steps[x].area < steps[y].area;
  });
  std::vector<std::size_t> place(n);
  for (std::size_t k = 0; k < n; ++k)
    place[by_density[k]] = k + 1; // Fenwick positions from 1
  fenwick_knapsack knapsack(n);
  // the sweep: steps by time (then length); each length's step replaces its last
  std::vector<std::size_t> by_time(n);
  for (std::size_t k = 0; k < n; ++k)
    by_time[k] = k;
  std::sort(by_time.begin(), by_time.end(), [&](std::size_t x, std::size_t y) {
    if (steps[x].time != steps[y].time)
      return steps[x].time < steps[y].time;
    return steps[x].length != steps[y].length ? steps[x].length < steps[y].length
                                              : steps[x].area > steps[y].area;
  });
  constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> current(rows, none);
  double past = 0;        // sum over the samples of their area below tau past their least
  std::size_t raised = 0; // lengths whose area below tau is past their least: past is 0 without
  double least = std::numeric_limits<double>::infinity();
  std::vector<fluid_state> states; // at each step time from `floor` on
  for (std::size_t k = 0; k < n;) {
    const double tau = steps[by_time[k]].time;
    for (; k < n && steps[by_time[k]].time == tau; ++k) {
      const std::size_t x = by_time[k];
      const std::size_t r = steps[x].row;
      const auto count = static_cast<double>(lengths.count[r]);
      if (current[r] != none) {
        const slowest_round_step& was = steps[current[r]];
        knapsack.add(place[current[r]], -count * tokens[r], -count * was.area);
        past -= count * (was.area - lengths.least[r].area);
        raised -= was.area > lengths.least[r].area ? 1 : 0;
      }
      current[r] = x;
      knapsack.add(place[x], count * tokens[r], count * steps[x].area);
      past += count * (steps[x].area - lengths.least[r].area);
      raised += steps[x].area > lengths.least[r].area ? 1 : 0;
    }
    if (tau < made->floor)
      continue;
    // (past summed with subtractions may keep a rounding residue: none once no length is raised)
    const double paid = raised == 0 ? 0.0 : std::max(0.0, past);
    const double carry = knapsack.carried(capacity);
    least = std::min(least, paid + std::max(0.0, world * tau - carry));
    states.push_back({tau, paid, carry});
  }
  slowest_round_terms out;
  out.fluid = (total + least) / world;
  out.whole = out.fluid;
  if (whole_groups) {
    const whole_group_rows whole(pr, lengths, made->time_at, made->rank_tokens_at);
    out.whole =
        std::max(out.fluid, (total + whole.least_charge(made->floor, states, work_limit)) / world);
  }
  return out;
}

//! The slowest-round term with whole groups (`slowest_round_bounds(...).whole`).
template <workload_estimator Estimator>
double slowest_round_bound(const problem& pr, const Estimator& estimator, const gap_rows& lengths,
                           double total) {
  return slowest_round_bounds(pr, estimator, lengths, total).whole;
}

} // namespace dcpp::detail
