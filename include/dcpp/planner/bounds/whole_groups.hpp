// The whole-group charge of the slowest round (docs/bounds.md section 6): in the slowest round
// every group has one size and its samples' times and rank-tokens add up within the round time
// and the budget, which bounds what the round's samples fill of its N x tau rank time.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "dcpp/planner/bounds/gap.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp::detail {

//! The fluid charge from `tau` on (to the next state): paid + max(0, N tau' - carried) at tau'.
struct fluid_state {
  double tau;
  double paid;
  double carried;
};

//! The whole-group charge of the slowest round (docs/bounds.md section 6).
//! Rows in length order, per legal size their time and rank-tokens (infinite where not legal:
//! a suffix of every size's column, since a longer length needs no smaller size), and per size
//! the suffix minima of the times. `least_charge` bounds the charge over an interval of tau by
//! one evaluation (`interval_charge`) and refines the intervals best first.
class whole_group_rows {
public:
  //! Work allowed to `least_charge`, in rows x sizes evaluated: a bound on the term's time far
  //! above what the benchmark's workloads need (docs/bounds.md section 6); past the limit (or
  //! where two evaluations do not fit) the charge is the least bound of the intervals still
  //! open, a valid but weaker value.
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

} // namespace dcpp::detail
