// The slowest-round term of `budget_lower_bound` (evaluate.hpp): in a plan's slowest round, of
// time tau, every sample sits on a size no slower than tau, and what the round's samples leave
// of its N x tau rank time, by their tokens or by their groups, is paid on top of the least areas.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/gap_bound.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp::detail {

//! The slowest-round term's two values, each (A + the least charge over tau) / N before the
//! micro-batch overhead: `fluid` fills the slowest round by rank-tokens alone, `whole` keeps its
//! groups whole as well (never below `fluid`). See `budget_lower_bound` for both proofs.
struct slowest_round_terms {
  double fluid = 0;
  double whole = 0;
};

//! The fluid charge from `tau` on (to the next state): paid + max(0, N tau' - carried) at tau'.
struct fluid_state {
  double tau;
  double paid;
  double carried;
};

//! The whole-group charge of the slowest round (`budget_lower_bound`'s comment has the proof).
//! Rows in length order, per legal size their time and rank-tokens (infinite where not legal:
//! a suffix of every size's column, since a longer length needs no smaller size), and per size
//! the suffix minima of the times. `least_charge` bounds the charge over an interval of tau by
//! one evaluation (`interval_charge`) and refines the intervals best first.
class whole_group_rows {
public:
  //! Work allowed to `least_charge`, in rows x sizes evaluated: at most about half a second on
  //! the development machine (some 33 ns each). The benchmark's workloads need 2 to 24
  //! evaluations to reach their value (two-tier `long_tail/1024`: 24 of 78K each, 62 ms); past
  //! the limit (or where two evaluations do not fit) the charge is the least bound of the
  //! intervals still open, a valid but weaker value.
  static constexpr double most_work = 1 << 24;
  //! The most rows x sizes it is built for (some 80 MB of tables and scratch); past it the term
  //! is the fluid one.
  static constexpr std::size_t most_entries = std::size_t{1} << 20;

  whole_group_rows(const problem& pr, const gap_rows& lengths, std::span<const double> time_at,
                   std::span<const double> rank_tokens_at)
      : world_(pr.options.world_size), budget_(static_cast<double>(pr.options.max_tokens_per_rank)),
        sizes_(pr.cp_sizes.size()), rows_(lengths.first_of.size()) {
    std::vector<std::size_t> order(rows_);
    for (std::size_t r = 0; r < rows_; ++r)
      order[r] = r;
    const auto length_of = [&](std::size_t r) {
      return pr.lengths[static_cast<std::size_t>(lengths.first_of[r])];
    };
    std::sort(order.begin(), order.end(),
              [&](std::size_t x, std::size_t y) { return length_of(x) < length_of(y); });
    cp_.assign(pr.cp_sizes.begin(), pr.cp_sizes.end());
    length_.resize(rows_);
    count_.resize(rows_);
    least_.resize(rows_);
    time_.resize(rows_ * sizes_);
    rank_tokens_.resize(rows_ * sizes_);
    suffix_time_.resize(rows_ * sizes_);
    for (std::size_t p = 0; p < rows_; ++p) {
      const std::size_t r = order[p];
      length_[p] = length_of(r);
      count_[p] = static_cast<double>(lengths.count[r]);
      least_[p] = lengths.least[r].area;
      slowest_own_time_ = std::max(slowest_own_time_, lengths.least[r].own_time);
      for (std::size_t s = 0; s < sizes_; ++s) {
        time_[s * rows_ + p] = time_at[r * sizes_ + s];
        rank_tokens_[s * rows_ + p] = rank_tokens_at[r * sizes_ + s];
      }
    }
    for (std::size_t s = 0; s < sizes_; ++s) {
      double low = std::numeric_limits<double>::infinity();
      for (std::size_t p = rows_; p-- > 0;) {
        low = std::min(low, time_[s * rows_ + p]);
        suffix_time_[s * rows_ + p] = low;
      }
    }
  }

  //! The least over tau >= `floor` of max(fluid charge, whole-group charge), the fluid charge
  //! read from the sweep's `states` (ascending, the first at `floor`).
  [[nodiscard]] double least_charge(double floor, std::span<const fluid_state> states,
                                    double work_limit = most_work) const {
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (rows_ == 0 || sizes_ == 0 || states.empty())
      return 0;
    // tau: every legal time from `floor` on; the charge is least at the start of some interval
    // between two of them
    std::vector<double> taus;
    taus.reserve(time_.size());
    for (const double t : time_)
      if (t >= floor && t < inf)
        taus.push_back(t);
    std::sort(taus.begin(), taus.end());
    taus.erase(std::unique(taus.begin(), taus.end()), taus.end());
    const std::size_t k_count = taus.size();
    if (k_count == 0)
      return 0;
    // the fluid charge at each, and their minima over ranges (a segment tree)
    std::vector<double> low(2 * k_count, inf);
    for (std::size_t k = 0, j = 0; k < k_count; ++k) {
      while (j + 1 < states.size() && states[j + 1].tau <= taus[k])
        ++j;
      low[k_count + k] = states[j].paid + std::max(0.0, world_ * taus[k] - states[j].carried);
    }
    for (std::size_t k = k_count; k-- > 1;)
      low[k] = std::min(low[2 * k], low[2 * k + 1]);
    const auto fluid_least = [&](std::size_t a, std::size_t b) {
      double m = inf;
      for (a += k_count, b += k_count; a < b; a /= 2, b /= 2) {
        if (a & 1)
          m = std::min(m, low[a++]);
        if (b & 1)
          m = std::min(m, low[--b]);
      }
      return m;
    };
    scratch work(rows_, sizes_);
    const auto evaluations_allowed =
        static_cast<std::int64_t>(work_limit / static_cast<double>(rows_ * sizes_));
    if (evaluations_allowed < 2)
      return fluid_least(0, k_count);
    std::int64_t evaluations_left = evaluations_allowed;
    const auto charge = [&](std::size_t a, std::size_t b) {
      --evaluations_left;
      return std::max(fluid_least(a, b), interval_charge(taus, a, b, work));
    };
    // a first value where the slowest round is the slowest own time (no sample raised)
    const std::size_t seed = static_cast<std::size_t>(
        std::lower_bound(taus.begin(), taus.end(), slowest_own_time_) - taus.begin());
    double best = seed < k_count ? charge(seed, seed + 1) : inf;
    // best first over intervals of taus, each keyed by a bound on its charge
    struct open {
      double key;
      std::size_t a, b;
    };
    const auto later = [](const open& x, const open& y) {
      return x.key != y.key ? x.key > y.key : x.a > y.a;
    };
    std::vector<open> heap{{fluid_least(0, k_count), 0, k_count}};
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const open next = heap.back();
      heap.pop_back();
      if (next.key >= best)
        break;
      if (evaluations_left <= 0)
        return next.key; // the least of the open intervals' bounds, below `best`
      const double bound = std::max(next.key, charge(next.a, next.b));
      if (bound >= best)
        continue;
      if (next.b - next.a == 1) {
        best = bound;
        continue;
      }
      const std::size_t mid = next.a + (next.b - next.a) / 2;
      heap.push_back({std::max(bound, fluid_least(next.a, mid)), next.a, mid});
      std::push_heap(heap.begin(), heap.end(), later);
      heap.push_back({std::max(bound, fluid_least(mid, next.b)), mid, next.b});
      std::push_heap(heap.begin(), heap.end(), later);
    }
    return best;
  }

private:
  struct increment {
    double slope;
    double weight;
    double value;
    std::int64_t length;
    std::size_t size;
  };
  struct scratch {
    std::vector<double> area_high, most_a, most_b, option;
    std::vector<increment> increments;
    scratch(std::size_t rows, std::size_t sizes)
        : area_high(rows), most_a(rows), most_b(rows), option(rows * sizes) {}
  };

  //! Row p's least area over the sizes of time at most tau.
  [[nodiscard]] double area_below(std::size_t p, double tau) const {
    double a = std::numeric_limits<double>::infinity();
    for (std::size_t s = 0; s < sizes_; ++s)
      if (time_[s * rows_ + p] <= tau)
        a = std::min(a, cp_[s] * time_[s * rows_ + p]);
    return a;
  }

  //! A bound on the whole-group charge at every tau of [taus[a], taus[b]) (the last interval
  //! open-ended): areas below tau at its end for what the samples pay, at its start for what
  //! they fill; leaders that reach the end; fillers within the end's time; each group's value
  //! at the start (it grows by at most its ranks per unit of tau, the round's by at most N, as
  //! fast as N tau).
  [[nodiscard]] double interval_charge(std::span<const double> taus, std::size_t a, std::size_t b,
                                       scratch& work) const {
    constexpr double inf = std::numeric_limits<double>::infinity();
    const double start = taus[a];
    const double last = taus[b - 1];
    const double window = b < taus.size() ? taus[b] : inf;
    double past = 0;
    for (std::size_t p = 0; p < rows_; ++p) {
      work.area_high[p] = area_below(p, start);
      past += count_[p] * (area_below(p, last) - least_[p]);
    }
    for (std::size_t s = 0; s < sizes_; ++s) {
      const double cp = cp_[s];
      const std::span<const double> times(time_.data() + s * rows_, rows_);
      const std::span<const double> tokens(rank_tokens_.data() + s * rows_, rows_);
      const std::span<const double> suffix(suffix_time_.data() + s * rows_, rows_);
      // the most least area (below tau) per time and per rank-token of the lengths up to p
      double most_a = 0;
      double most_b = 0;
      for (std::size_t p = 0; p < rows_ && times[p] < inf; ++p) {
        most_a = std::max(most_a, work.area_high[p] / times[p]);
        most_b = std::max(most_b, work.area_high[p] / tokens[p]);
        work.most_a[p] = std::min(cp, most_a); // a filler's is at most cp
        work.most_b[p] = most_b;
      }
      for (std::size_t p = 0; p < rows_; ++p) {
        const double t = times[p];
        double& value = work.option[p * sizes_ + s];
        if (!(t <= last)) {
          value = -1; // no group led by this length on this size in the interval
          continue;
        }
        // the fillers: no more rank-tokens than the leader, within the rest of the budget and
        // of the time (a superset by the suffix minima where times do not grow with length)
        const double own = tokens[p];
        const auto fit = static_cast<std::size_t>(
            std::upper_bound(tokens.begin(), tokens.end(), std::min(own, budget_ - own)) -
            tokens.begin());
        const auto quick = static_cast<std::size_t>(
            std::upper_bound(suffix.begin(), suffix.end(), window - t) - suffix.begin());
        const std::size_t m = std::min(fit, quick);
        const double fill = m == 0 ? 0.0
                                   : std::max(0.0, std::min(work.most_a[m - 1] * (start - t),
                                                            work.most_b[m - 1] * (budget_ - own)));
        value = std::min(cp * start, work.area_high[p] + fill);
      }
    }
    // each length leads groups on one size or none (copies by its count): the LP of that choice
    // within N ranks is the greedy over each length's upper hull of (ranks, value)
    work.increments.clear();
    std::pair<double, double> hull[max_hull];
    for (std::size_t p = 0; p < rows_; ++p) {
      std::size_t h = 0;
      hull[h++] = {0.0, 0.0};
      std::size_t sizes_of[max_hull];
      for (std::size_t s = 0; s < sizes_; ++s) {
        const double value = work.option[p * sizes_ + s];
        if (!(value > hull[h - 1].second))
          continue; // none, or more ranks for no more value
        const double w = cp_[s];
        while (h >= 2 && (hull[h - 1].second - hull[h - 2].second) * (w - hull[h - 2].first) <=
                             (value - hull[h - 2].second) * (hull[h - 1].first - hull[h - 2].first))
          --h;
        sizes_of[h] = s;
        hull[h++] = {w, value};
      }
      for (std::size_t k = 1; k < h; ++k) {
        const double dw = hull[k].first - hull[k - 1].first;
        const double dv = hull[k].second - hull[k - 1].second;
        work.increments.push_back(
            {dv / dw, dw * count_[p], dv * count_[p], length_[p], sizes_of[k]});
      }
    }
    std::sort(work.increments.begin(), work.increments.end(),
              [](const increment& x, const increment& y) {
                if (x.slope != y.slope)
                  return x.slope > y.slope;
                return x.length != y.length ? x.length < y.length : x.size < y.size;
              });
    double room = world_;
    double filled = 0;
    for (const increment& inc : work.increments) {
      if (!(room > 0))
        break;
      const double take = std::min(1.0, room / inc.weight);
      filled += take * inc.value;
      room -= take * inc.weight;
    }
    return past + std::max(0.0, world_ * start - filled);
  }

  static constexpr std::size_t max_hull = gap_bound_most_sizes + 1;
  double world_;
  double budget_;
  std::size_t sizes_;
  std::size_t rows_;
  std::vector<double> cp_;
  std::vector<std::int64_t> length_;
  std::vector<double> count_, least_;
  double slowest_own_time_ = 0; // the longest time of a length on its size of least area
  std::vector<double> time_, rank_tokens_, suffix_time_; // per size, per row in length order
};

//! The slowest-round term of `budget_lower_bound` (see there), before the micro-batch overhead:
//! `fluid`, min over tau of (A + sum_i past_i(tau) + max(0, N tau - KS_tau(N M))) / N, tau from
//! the least time every sample can reach, and `whole`, the same with each tau's charge also at
//! least the whole-group charge (`whole_group_rows`). `lengths`: the batch's rows with their counts
//! and least areas (`make_gap_rows`, or `budget_lower_bound`'s own), `total` their least areas
//! summed. Per length, its area below tau falls in steps as tau passes the times of its sizes; tau
//! is swept over those times once, each length's current area kept in a Fenwick tree over
//! every (length, step) in knapsack order, so that KS is one descent: O(P log P) for P steps
//! (lengths x legal sizes at most). Ties are broken by length, never by row number, so the
//! sums come out the same with or without the problem's cost rows.
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
  // per length: its least rank-tokens and its steps (time, area: the least area of the sizes of
  // at most that time), by time; `floor`: the least time every length reaches
  struct step {
    double time;
    double area;
    std::int64_t length;
    std::size_t row;
  };
  std::vector<step> steps;
  std::vector<double> tokens(rows, std::numeric_limits<double>::infinity());
  std::vector<std::pair<double, double>> sizes; // (time, area) of one length
  // every length's time and rank-tokens on every size (infinite where it is not legal), for the
  // whole groups below, where they run
  const std::size_t size_count = pr.cp_sizes.size();
  const bool whole_groups =
      size_count <= gap_bound_most_sizes && rows * size_count <= whole_group_rows::most_entries;
  const std::size_t entries = whole_groups ? rows * size_count : 0;
  std::vector<double> time_at(entries, std::numeric_limits<double>::infinity());
  std::vector<double> rank_tokens_at(entries, std::numeric_limits<double>::infinity());
  double floor = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto first = static_cast<std::size_t>(first_of[r]);
    sizes.clear();
    for (std::size_t s = 0; s < size_count; ++s) {
      const std::int32_t cp = pr.cp_sizes[s];
      if (cp >= pr.min_cp_of[first]) {
        const double w = sample_cost(pr, estimator, first, cp);
        const auto per_rank = static_cast<double>(pr.rank_tokens(first, cp));
        sizes.emplace_back(w, w * cp);
        tokens[r] = std::min(tokens[r], per_rank * cp);
        if (whole_groups) {
          time_at[r * size_count + s] = w;
          rank_tokens_at[r * size_count + s] = per_rank;
        }
      }
    }
    if (sizes.empty())
      return {};
    std::sort(sizes.begin(), sizes.end());
    floor = std::max(floor, sizes.front().first);
    double least = std::numeric_limits<double>::infinity();
    for (const auto& [w, a] : sizes)
      if (a < least) {
        least = a;
        steps.push_back({w, a, pr.lengths[first], r});
      }
  }
  if (std::ranges::any_of(tokens, [](double t) { return !(t > 0); }))
    return {};
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
  std::vector<double> tree_tokens(n + 1, 0.0);
  std::vector<double> tree_area(n + 1, 0.0);
  std::vector<double> at_tokens(n + 1, 0.0); // what each position holds now
  std::vector<double> at_area(n + 1, 0.0);
  const auto add = [&](std::size_t pos, double t, double a) {
    at_tokens[pos] += t;
    at_area[pos] += a;
    for (; pos <= n; pos += pos & (~pos + 1)) {
      tree_tokens[pos] += t;
      tree_area[pos] += a;
    }
  };
  // KS(capacity): the densest areas whose tokens fit, the last in part
  const std::size_t top = std::bit_floor(n);
  const auto carried = [&] {
    std::size_t pos = 0;
    double t = 0;
    double a = 0;
    for (std::size_t half = top; half > 0; half /= 2)
      if (pos + half <= n && t + tree_tokens[pos + half] <= capacity) {
        pos += half;
        t += tree_tokens[pos];
        a += tree_area[pos];
      }
    for (std::size_t next = pos + 1; next <= n; ++next) // the next position that holds tokens
      if (at_tokens[next] > 0)
        return a + at_area[next] * (capacity - t) / at_tokens[next];
    return a;
  };
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
        const step& was = steps[current[r]];
        add(place[current[r]], -count * tokens[r], -count * was.area);
        past -= count * (was.area - lengths.least[r].area);
        raised -= was.area > lengths.least[r].area ? 1 : 0;
      }
      current[r] = x;
      add(place[x], count * tokens[r], count * steps[x].area);
      past += count * (steps[x].area - lengths.least[r].area);
      raised += steps[x].area > lengths.least[r].area ? 1 : 0;
    }
    if (tau < floor)
      continue;
    // (past summed with subtractions may keep a rounding residue: none once no length is raised)
    const double paid = raised == 0 ? 0.0 : std::max(0.0, past);
    const double carry = carried();
    least = std::min(least, paid + std::max(0.0, world * tau - carry));
    states.push_back({tau, paid, carry});
  }
  slowest_round_terms out;
  out.fluid = (total + least) / world;
  out.whole = out.fluid;
  if (whole_groups) {
    const whole_group_rows whole(pr, lengths, time_at, rank_tokens_at);
    out.whole =
        std::max(out.fluid, (total + whole.least_charge(floor, states, work_limit)) / world);
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
