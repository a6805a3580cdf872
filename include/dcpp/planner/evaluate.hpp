// A plan under an estimator: `evaluate` (group, micro-batch and step times, the metrics), the
// fewest micro-batches any plan needs, and the two lower bounds on the step time.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/core/math.hpp"
#include "dcpp/error.hpp"
#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/gap_bound.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/plan.hpp"
#include "dcpp/planner/slowest_round.hpp"

namespace dcpp {

//! Fewest micro-batches any plan needs: total padded tokens (each sample on the legal size that
//! pads it least: its smallest, but where a larger contiguous size pads less) over the world's
//! token capacity, rounded up to the micro-batch multiple.
inline std::int32_t min_microbatches(const problem& pr) {
  return detail::fewest_microbatches(pr);
}

namespace detail {
//! `lower_bound` with the fewest micro-batches `k_min` (= min_microbatches(pr)) given.
template <workload_estimator Estimator>
double lower_bound(const problem& pr, const Estimator& estimator, std::int32_t k_min) {
  return least_work_of(pr, estimator).bound() + k_min * microbatch_overhead(pr, estimator);
}
} // namespace detail

//! `LB = max( sum_i min_c c*cost(L_i,c) / N , max_i min_c cost(L_i,c) )` over the feasible c,
//! plus the micro-batch overhead (`microbatch_overhead(pr, estimator)`) for the fewest
//! micro-batches any plan needs.
template <workload_estimator Estimator>
double lower_bound(const problem& pr, const Estimator& estimator) {
  return detail::lower_bound(pr, estimator, min_microbatches(pr));
}

namespace detail {
//! The fractional knapsack of samples' least areas by their least rank-tokens, for
//! `budget_lower_bound`: `carried(room)` is the most least area samples of at most `room`
//! rank-tokens in all can carry (the densest by area per rank-token first, the last in part).
class least_area_knapsack {
public:
  struct item {
    double density; // least area per least rank-tokens
    double tokens;  // least rank-tokens
    std::size_t id;
  };
  //! The item of sample `id`, of least area `area` over `tokens` least rank-tokens.
  [[nodiscard]] static item item_of(double area, double tokens, std::size_t id) noexcept {
    return {area / tokens, tokens, id};
  }
  //! The knapsack's order: the densest first, then by id.
  [[nodiscard]] static bool before(const item& a, const item& b) noexcept {
    return a.density != b.density ? a.density > b.density : a.id < b.id;
  }
  explicit least_area_knapsack(std::vector<item> items) : least_area_knapsack(sort(items), 0) {}
  //! `items` already in the knapsack's order (`before`).
  least_area_knapsack(std::vector<item>&& sorted, int) : items_(std::move(sorted)) {
    DCPP_EXPECTS(std::is_sorted(items_.begin(), items_.end(), before));
    tokens_before_.assign(items_.size() + 1, 0);
    area_before_.assign(items_.size() + 1, 0);
    for (std::size_t s = 0; s < items_.size(); ++s) {
      tokens_before_[s + 1] = tokens_before_[s] + items_[s].tokens;
      area_before_[s + 1] = area_before_[s] + items_[s].density * items_[s].tokens;
    }
  }
  [[nodiscard]] double carried(double room) const {
    if (room <= 0)
      return 0.0;
    const auto s = static_cast<std::size_t>(
        std::upper_bound(tokens_before_.begin(), tokens_before_.end(), room) -
        tokens_before_.begin());
    if (s > items_.size())
      return area_before_.back();
    return area_before_[s - 1] + items_[s - 1].density * (room - tokens_before_[s - 1]);
  }

private:
  static std::vector<item>&& sort(std::vector<item>& items) {
    std::sort(items.begin(), items.end(), before);
    return std::move(items);
  }
  std::vector<item> items_;
  std::vector<double> tokens_before_; // prefix sums in knapsack order
  std::vector<double> area_before_;
};

//! How many big samples the forced-round term deals, each count a bound of its own (2^k rounds'
//! subsets, 3^k partitions): `budget_bound_terms` takes the largest. More is not always
//! tighter: a sample dealt as big leaves the fractional fill of the others, and a size's pieces
//! past six are dealt by bounds, not exactly (two-tier `pareto/s2`: 8 gives 0.958 of its plan,
//! 12 gives 0.975; `context_ext/64`: 10 gives 0.956, 12 gives 0.945).
inline constexpr std::size_t forced_round_counts[] = {8, 10, 12};
//! The most legal sizes the forced-round term examines: each big sample chooses among them, and
//! the choices multiply (past it the term is 0 and its inputs are not worked out).
inline constexpr std::size_t forced_round_most_sizes = 16;

//! What `forced_round_bound` needs whatever its count of big samples, worked out once for all
//! counts: the samples of longest least time (as many as the largest count), and over the other
//! samples their fractional knapsack's items, in its order, and their most yield per size. A
//! count of k then adds back the samples of `order` past k.
struct forced_round_inputs {
  std::vector<std::size_t> order;              // longest least time first, then by id
  std::vector<least_area_knapsack::item> rest; // the samples not in `order`, in knapsack order
  std::vector<double> rest_yield;              // per size: the most of any sample not in `order`
  std::vector<std::vector<double>> yield_of;   // per sample of `order`, per size (0: none)
};

//! `forced_round_inputs` for up to `most_big` big samples. `least_area`, `least_time`,
//! `least_tokens`: per sample over its legal sizes (rank-tokens: tokens per rank x size);
//! `row_of`, `first_of`: each sample's length row and each row's first sample (the yields are
//! worked out once per length, from the row's first sample: `least_area` must be the same for
//! every sample of a length, as the bound's per-length values are).
template <workload_estimator Estimator>
forced_round_inputs
forced_round_setup(const problem& pr, const Estimator& estimator,
                   const std::vector<double>& least_area, const std::vector<double>& least_time,
                   const std::vector<double>& least_tokens, std::span<const std::int32_t> row_of,
                   std::span<const std::int32_t> first_of, std::size_t most_big) {
  const std::size_t n = pr.size();
  const std::size_t sizes = pr.cp_sizes.size();
  forced_round_inputs in;
  in.order.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    in.order[i] = i;
  const std::size_t m = std::min(most_big, n);
  std::partial_sort(in.order.begin(), in.order.begin() + static_cast<std::ptrdiff_t>(m),
                    in.order.end(), [&](std::size_t a, std::size_t b) {
                      return least_time[a] != least_time[b] ? least_time[a] > least_time[b] : a < b;
                    });
  in.order.resize(m);
  std::vector<bool> big(n, false);
  std::vector<std::size_t> others_in_row(first_of.size(), 0);
  for (const std::size_t i : in.order)
    big[i] = true;
  for (std::size_t i = 0; i < n; ++i)
    if (!big[i]) {
      others_in_row[static_cast<std::size_t>(row_of[i])] += 1;
      in.rest.push_back(least_area_knapsack::item_of(least_area[i], least_tokens[i], i));
    }
  std::sort(in.rest.begin(), in.rest.end(), least_area_knapsack::before);
  // per length and size: the least area a sample brings per area it takes there
  std::vector<double> row_yield(first_of.size() * sizes, 0.0);
  for (std::size_t r = 0; r < first_of.size(); ++r) {
    const auto first = static_cast<std::size_t>(first_of[r]);
    for (std::size_t c = 0; c < sizes; ++c)
      if (pr.cp_sizes[c] >= pr.min_cp_of[first]) {
        const double taken = sample_cost(pr, estimator, first, pr.cp_sizes[c]) * pr.cp_sizes[c];
        if (taken > 0)
          row_yield[r * sizes + c] = std::min(1.0, least_area[first] / taken);
      }
  }
  in.rest_yield.assign(sizes, 0.0);
  for (std::size_t r = 0; r < first_of.size(); ++r)
    if (others_in_row[r] > 0)
      for (std::size_t c = 0; c < sizes; ++c)
        in.rest_yield[c] = std::max(in.rest_yield[c], row_yield[r * sizes + c]);
  for (const std::size_t i : in.order) {
    const auto r = static_cast<std::size_t>(row_of[i]);
    in.yield_of.emplace_back(row_yield.begin() + static_cast<std::ptrdiff_t>(r * sizes),
                             row_yield.begin() + static_cast<std::ptrdiff_t>((r + 1) * sizes));
  }
  return in;
}

//! The forced-round term of `budget_lower_bound` with the `most_big` samples of longest least
//! time as the big ones, before the micro-batch overhead (see there); 0 where the batch has more
//! legal sizes than it examines or the search passes `steps_left` steps (it takes off those it
//! took). `inputs`: `forced_round_setup` for at least `most_big` samples (its order is by least
//! time); `least_area`, `least_tokens`: per sample over its legal sizes (rank-tokens: tokens per
//! rank x size); `total`: the sum of `least_area`.
template <workload_estimator Estimator>
double forced_round_bound(const problem& pr, const Estimator& estimator,
                          const forced_round_inputs& inputs, const std::vector<double>& least_area,
                          const std::vector<double>& least_tokens, double total,
                          std::size_t most_big, std::int64_t& steps_left) {
  const std::size_t n = pr.size();
  if (n == 0 || pr.cp_sizes.size() > forced_round_most_sizes || most_big == 0 || most_big > 16)
    return 0;
  const double world = pr.options.world_size;
  const double budget = static_cast<double>(pr.options.max_tokens_per_rank);
  const double capacity = world * budget;
  // the big samples: the costliest by least time
  const std::size_t m = std::min(most_big, n);
  DCPP_EXPECTS(m <= inputs.order.size() && least_area.size() == n);
  const std::vector<std::size_t>& order = inputs.order;
  struct option {
    double time;
    double area;
    double ranks;
    double tokens;    // per rank
    std::size_t size; // index in pr.cp_sizes
  };
  std::vector<std::vector<option>> options(m);
  for (std::size_t k = 0; k < m; ++k) {
    const std::size_t i = order[k];
    for (std::size_t c = 0; c < pr.cp_sizes.size(); ++c)
      if (const std::int32_t cp = pr.cp_sizes[c]; cp >= pr.min_cp_of[i]) {
        const double w = sample_cost(pr, estimator, i, cp);
        options[k].push_back(
            {w, w * cp, static_cast<double>(cp), static_cast<double>(pr.rank_tokens(i, cp)), c});
      }
  }
  for (auto& os : options) // the search tries the least area first
    std::sort(os.begin(), os.end(), [](const option& a, const option& b) {
      return a.area != b.area ? a.area < b.area : a.time < b.time;
    });
  // big samples alike to the one before them (the same options and least area): the search
  // gives them choices in order only, as alike samples charge the same in any order (on
  // two-tier `long_tail/1024`, whose longest samples are 131,072 tokens each, 8 big samples
  // take 24K steps instead of 99K, and 10 fit the steps)
  std::vector<bool> alike(m, false);
  for (std::size_t k = 1; k < m; ++k)
    alike[k] = least_area[order[k]] == least_area[order[k - 1]] &&
               std::equal(options[k].begin(), options[k].end(), options[k - 1].begin(),
                          options[k - 1].end(), [](const option& a, const option& b) {
                            return a.time == b.time && a.area == b.area && a.ranks == b.ranks &&
                                   a.tokens == b.tokens && a.size == b.size;
                          });
  // the other samples as a fractional knapsack: those past the big ones in `inputs.order` join
  // the rest, in its order
  std::vector<least_area_knapsack::item> small = inputs.rest;
  for (std::size_t k = m; k < order.size(); ++k) {
    const std::size_t i = order[k];
    const auto x = least_area_knapsack::item_of(least_area[i], least_tokens[i], i);
    small.insert(std::upper_bound(small.begin(), small.end(), x, least_area_knapsack::before), x);
  }
  const least_area_knapsack others(std::move(small), 0);
  // per size: the most least area an other sample brings per area it takes on that size
  std::vector<double> yield = inputs.rest_yield;
  for (std::size_t k = m; k < order.size(); ++k)
    for (std::size_t c = 0; c < yield.size(); ++c)
      yield[c] = std::max(yield[c], inputs.yield_of[k][c]);
  // The least charge of a round holding the big samples of `mask`, over every choice of their
  // sizes and of how many groups each size's pieces take (budget_lower_bound has the proof),
  // searched with the least area first; it stops, and the term is dropped, past `steps_left`
  // steps (what is left of them on return).
  const std::int64_t most_visits = steps_left;
  constexpr std::size_t exact_pieces = 6; // a size's pieces dealt exactly up to this many
  std::int64_t visits = 0;
  std::vector<std::size_t> members;
  std::vector<const option*> chosen(m);
  std::vector<std::size_t> chosen_index(m); // in options[members[at]]
  struct size_class {
    const option* first;
    double area = 0;
    const std::vector<double>* slowest = nullptr; // [g - 1]: least slowest group of g (or bound)
  };
  // tau per size and set of big samples on it, worked out once
  std::vector<std::vector<double>> dealings(pr.cp_sizes.size() << m); // empty: not yet
  std::vector<size_class> classes;
  std::vector<double> times_of, tokens_of, subset_time, subset_tokens, dealt, next;
  std::vector<std::size_t> groups;
  // tau(g) of the pieces in times_of / tokens_of: exactly by a subset DP, or its bounds
  const auto deal = [&](std::vector<double>& slowest) {
    constexpr double never = std::numeric_limits<double>::infinity();
    const std::size_t p = times_of.size();
    slowest.assign(p, never);
    if (p <= exact_pieces) {
      const std::size_t sets = std::size_t{1} << p;
      subset_time.assign(sets, 0.0);
      subset_tokens.assign(sets, 0.0);
      for (std::size_t set = 1; set < sets; ++set) {
        const auto low = static_cast<std::size_t>(std::countr_zero(set));
        subset_time[set] = subset_time[set & (set - 1)] + times_of[low];
        subset_tokens[set] = subset_tokens[set & (set - 1)] + tokens_of[low];
      }
      dealt.assign(sets, never);
      dealt[0] = 0;
      for (std::size_t g = 1; g <= p; ++g) {
        next.assign(sets, never);
        next[0] = 0;
        for (std::size_t set = 1; set < sets; ++set) {
          const std::size_t low = set & (~set + 1);
          for (std::size_t sub = set; sub != 0; sub = (sub - 1) & set)
            if ((sub & low) && subset_tokens[sub] <= budget)
              next[set] = std::min(next[set], std::max(subset_time[sub], dealt[set ^ sub]));
        }
        dealt.swap(next);
        slowest[g - 1] = dealt[sets - 1];
      }
      return;
    }
    std::vector<double> slow = times_of;
    std::sort(slow.begin(), slow.end(), std::greater<>());
    double time = 0;
    double tokens = 0;
    std::size_t wide = 0;
    for (std::size_t b = 0; b < p; ++b) {
      time += times_of[b];
      tokens += tokens_of[b];
      wide += 2 * tokens_of[b] > budget ? 1 : 0;
    }
    for (std::size_t g = 1; g <= p; ++g)
      if (tokens <= static_cast<double>(g) * budget && wide <= g)
        slowest[g - 1] =
            std::max({slow[0], time / static_cast<double>(g), g < p ? slow[g - 1] + slow[g] : 0.0});
  };
  // the least charge of the chosen pieces (area `area`, `past` of it past the least), or
  // infinity where no dealing fits the world
  const auto least_charge = [&](std::size_t count, double area, double past, double fill) {
    classes.clear();
    for (std::size_t a = 0; a < count; ++a) {
      bool first = true; // the first piece of its size deals the size
      for (std::size_t b = 0; b < a && first; ++b)
        first = chosen[b]->size != chosen[a]->size;
      if (!first)
        continue;
      size_class sc{chosen[a]};
      times_of.clear();
      tokens_of.clear();
      std::size_t set = 0;
      for (std::size_t b = a; b < count; ++b)
        if (chosen[b]->size == chosen[a]->size) {
          times_of.push_back(chosen[b]->time);
          tokens_of.push_back(chosen[b]->tokens);
          sc.area += chosen[b]->area;
          set |= std::size_t{1} << members[b];
        }
      const std::size_t key = (chosen[a]->size << m) | set;
      if (dealings[key].empty())
        deal(dealings[key]);
      sc.slowest = &dealings[key];
      classes.push_back(std::move(sc));
    }
    double least = std::numeric_limits<double>::infinity();
    groups.assign(classes.size(), 1);
    for (;;) {
      double ranks = 0;
      double t = area / world;
      for (std::size_t c = 0; c < classes.size(); ++c) {
        ranks += classes[c].first->ranks * static_cast<double>(groups[c]);
        t = std::max(t, (*classes[c].slowest)[groups[c] - 1]);
      }
      if (ranks <= world && t < std::numeric_limits<double>::infinity()) {
        // the free ranks (their time, and what fits their tokens), then the groups' gaps
        double fillable = std::min((world - ranks) * t, others.carried((world - ranks) * budget));
        for (std::size_t c = 0; c < classes.size(); ++c)
          fillable +=
              yield[classes[c].first->size] *
              (classes[c].first->ranks * static_cast<double>(groups[c]) * t - classes[c].area);
        least = std::min(least, past + world * t - area - std::min(fill, fillable));
      }
      std::size_t c = 0; // the next count of groups per size
      while (c < classes.size() && groups[c] == classes[c].slowest->size())
        groups[c++] = 1;
      if (c == classes.size())
        break;
      ++groups[c];
    }
    return least;
  };
  const std::size_t subsets = std::size_t{1} << m;
  std::vector<double> charge(subsets, std::numeric_limits<double>::infinity());
  for (std::size_t mask = 1; mask < subsets; ++mask) {
    members.clear();
    double tokens = 0;
    for (std::size_t k = 0; k < m; ++k)
      if ((mask >> k) & 1) {
        members.push_back(k);
        tokens += least_tokens[order[k]];
      }
    if (tokens > capacity)
      continue; // never in one round
    const double fill = others.carried(capacity - tokens);
    double& best_charge = charge[mask];
    const auto search = [&](const auto& self, std::size_t at, double area, double past) -> void {
      if (past >= best_charge || ++visits > most_visits)
        return; // the charge is at least the area past the least
      if (at == members.size()) {
        best_charge = std::min(best_charge, least_charge(at, area, past, fill));
        return;
      }
      const std::size_t k = members[at];
      const double least = least_area[order[k]];
      const std::size_t from =
          at > 0 && members[at - 1] + 1 == k && alike[k] ? chosen_index[at - 1] : 0;
      for (std::size_t x = from; x < options[k].size(); ++x) {
        chosen[at] = &options[k][x];
        chosen_index[at] = x;
        self(self, at + 1, area + chosen[at]->area, past + std::max(0.0, chosen[at]->area - least));
      }
    };
    search(search, 0, 0.0, 0.0);
  }
  steps_left = std::max<std::int64_t>(0, most_visits - visits);
  if (visits > most_visits)
    return 0;
  // the big samples dealt into rounds: the least total charge over the partitions
  std::vector<double> best(subsets, std::numeric_limits<double>::infinity());
  best[0] = 0;
  for (std::size_t mask = 1; mask < subsets; ++mask) {
    const std::size_t low = mask & (~mask + 1);
    for (std::size_t sub = mask; sub != 0; sub = (sub - 1) & mask)
      if (sub & low)
        best[mask] = std::min(best[mask], charge[sub] + best[mask ^ sub]);
  }
  return (total + best[subsets - 1]) / world;
}

//! `budget_lower_bound`'s terms: every term but the gaps (with the overhead of the fewest rounds),
//! and the gap term (0 where it has nothing to say); the bound is the larger.
struct budget_terms {
  double without_gaps = 0;
  double gaps = 0;
};

template <workload_estimator Estimator>
budget_terms budget_bound_terms(const problem& pr, const Estimator& estimator) {
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
  std::vector<least_area_knapsack::item> light;
  std::vector<double> areas(pr.size()); // per sample: least area, least time, least rank-tokens
  std::vector<double> times(pr.size());
  std::vector<double> tokens(pr.size());
  // the values over the legal sizes, once per length (tabulate_costs's cost rows, or the same
  // grouping made here): on 65,536 samples of 7,075 lengths over 1,024 contiguous sizes, a tenth of
  // the work
  // (the rows are the gap term's too: each row's least area, and its own time, the time on the
  // size of least area, are kept there, `lengths.least`)
  struct over_sizes {
    double least_time = std::numeric_limits<double>::infinity();
    double most_free = 0;
    double least_tokens = std::numeric_limits<double>::infinity();
  };
  gap_rows lengths;
  start_gap_rows(pr, lengths);
  const std::span<const std::int32_t> row_of = lengths.row_of, first_of = lengths.first_of;
  std::vector<over_sizes> rows(first_of.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto first = static_cast<std::size_t>(first_of[r]);
    over_sizes& v = rows[r];
    length_least& own = lengths.least[r];
    for (const std::int32_t cp : pr.cp_sizes) {
      if (cp < pr.min_cp_of[first])
        continue;
      const double w = sample_cost(pr, estimator, first, cp);
      own.take(w, cp);
      v.least_time = std::min(v.least_time, w);
      v.most_free = std::max(v.most_free, (n - cp) * w);
      v.least_tokens =
          std::min(v.least_tokens, static_cast<double>(pr.rank_tokens(first, cp)) * cp);
    }
  }
  finish_gap_rows(pr, lengths);
  for (std::size_t i = 0; i < pr.size(); ++i) {
    const auto r = static_cast<std::size_t>(row_of[i]);
    const double least_area = lengths.least[r].area;
    const auto& [least_time, most_free, least_tokens] = rows[r];
    area += least_area;
    longest = std::max(longest, least_time);
    areas[i] = least_area;
    times[i] = least_time;
    tokens[i] = least_tokens;
    if (is_heavy(i)) {
      ++heavy;
      heavy_time += n * least_time;
      free_time += most_free;
      free_tokens += (n - pr.min_cp_of[i]) * budget;
    } else {
      light_area += least_area;
      light.push_back(least_area_knapsack::item_of(least_area, least_tokens, i));
    }
  }
  const double carried = // KS(free_tokens)
      heavy > 0 ? least_area_knapsack(std::move(light)).carried(free_tokens) : 0.0;
  const double overhead = microbatch_overhead(pr, estimator);
  const std::int32_t k_min = min_microbatches(pr);
  // without heavy samples every term is lower_bound's (the same sums in the same order)
  const double work_bound =
      heavy == 0 ? 0.0 : (heavy_time + light_area - std::min(carried, free_time)) / n;
  // the counts share 2^19 search steps (10 big samples of two-tier `context_ext/64` take
  // 262,590): about 0.1 s at most on the development machine, where the whole bound of two-tier
  // `long_tail/1024` takes 0.11 s (0.15 s while each count worked out its own inputs)
  double forced = 0;
  std::int64_t steps_left = std::int64_t{1} << 19;
  if (!pr.lengths.empty() && pr.cp_sizes.size() <= forced_round_most_sizes) {
    const forced_round_inputs inputs =
        forced_round_setup(pr, estimator, areas, times, tokens, row_of, first_of,
                           std::ranges::max(forced_round_counts));
    for (const std::size_t most_big : forced_round_counts) {
      forced = std::max(forced, forced_round_bound(pr, estimator, inputs, areas, tokens, area,
                                                   most_big, steps_left));
      if (most_big >= pr.size())
        break; // every sample is big: more deal the same
    }
  }
  const auto fewest =
      static_cast<std::int64_t>(std::max<std::size_t>(static_cast<std::size_t>(k_min), heavy));
  double gaps = 0; // the gap term of each class of samples (same smallest size, at least 2)
  for (const gap_class& c : gap_classes(pr, estimator, lengths, fewest, overhead))
    gaps = std::max(gaps, c.bound);
  const double slowest = pr.cp_sizes.size() <= gap_bound_most_sizes
                             ? slowest_round_bound(pr, estimator, lengths, lengths.total)
                             : 0.0;
  return {std::max({area / n, longest, work_bound, forced, slowest}) +
              static_cast<double>(fewest) * overhead,
          gaps};
}
} // namespace detail

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
//! heavy samples) rounds of overhead.
//! Forced rounds (`detail::forced_round_bound`; where the options allow at most 16 sizes): the
//! k samples of longest least time ("big") each sit in some round (k = 8, 10 and 12, each a
//! bound: the term is the largest). Take a round of time T
//! holding the set S of big samples, each on a size c_j (area a_j, time w_j, rank-tokens t_j).
//! A group has one size, so big samples on different sizes sit on different ranks; those in one
//! group share its ranks, their tokens within the budget M and their times adding up within T.
//! So if size c's pieces take g_c groups, T >= tau_c(g_c), the least slowest group of c's
//! pieces dealt into g_c groups within M; sum_c c g_c = R <= N; and N T >= sum_S a_j. The
//! round's N x T rank time is the big samples' area, the other samples' area in it, and idle
//! time. The others bring at most `KS(N M - tok_S)` of least area (their least rank-tokens fit
//! the free ones); in the g_c groups of size c they bring at most y_c per area they take, y_c
//! being the most least area per area any other sample has on size c, so at most
//! y_c (c g_c T - a_c) there (a_c: the big area on size c), and on the other ranks at most
//! their time (N - R) T and what fits their tokens, KS((N - R) M). So the round's time past
//! every sample's least area is at least
//!   charge = sum_S (a_j - least_j) + N T - sum_S a_j
//!            - min( KS(N M - tok_S), min((N - R) T, KS((N - R) M)) + sum_c y_c (c g_c T - a_c) )
//! which never falls as T grows (the subtracted term grows by at most N - R + sum_c c g_c = N
//! per unit of T), so it is taken at the least T the choice allows,
//! max(sum_S a_j / N, max_c tau_c(g_c)), and minimised over every choice of sizes and groups.
//! tau_c is exact up to six pieces (a subset DP) and a lower bound past that (the slowest
//! piece, their time / g, the two least of the g + 1 slowest; none where their tokens pass g M
//! or more than g pieces hold over M / 2): a lower T only lowers the charge. The rounds are the
//! least-charge partition of the big samples (a subset DP):
//!   N * sum_k T_k >= sum_i least_i + min over partitions of sum charge(S).
//! Gaps (`detail::gap_bound`; where the options allow at most 64 sizes), for each class of
//! samples of one smallest legal size s >= 2 (the 128 slowest by own time o_i, the time on the
//! size of least area): a member i on size c (time w, past p = c w - least_i) in a round of time
//! T >= w. If no other member fits beside it on c (rank-tokens within M), the rest of its group
//! is other samples, each of time at most T - w and rank-tokens at most M - t_i(c), so its rank
//! time past their least areas is at least h = p + c (T - w) (1 - y), y the most least area per
//! area such a sample has on c (a step function of T - w); if another member fits, at least p
//! (members sharing a group: their p add up, no more). So every member charges its round at
//! least h_i(T), the least over its sizes. For T >= o_i take instead the least of h_i over
//! [T, infinity), which never falls as T grows, capped by P_i, the least p of a size faster than
//! o_i, which is also what it charges in a round faster than o_i. Relaxing which round each
//! member sits in, it charges least in the least round time >= o_i, and lowering that time to
//! the largest own time below it lowers every charge: so, members by own time, the rounds serve
//! consecutive runs at their first member's own time, the members before the first run paying
//! P_i. A DP over the runs gives F(k), the least charge with k rounds; a plan of K rounds has
//! some k <= K of them, so
//!   step >= (sum_i least_i + F(k)) / N + max(k, fewest rounds) x overhead
//! for the best k; the bound takes the best class. Without overhead more rounds cost nothing
//! and the term says nothing.
//! The slowest round (`detail::slowest_round_bound`; where the options allow at most 64 sizes):
//! let tau be the time of a plan's slowest round, T_1. Every sample sits in a round of time at
//! most tau, on a size whose time is at most tau (a group's time is its samples' times summed),
//! so it takes at least area_i(tau), its least area over those sizes: past_i(tau) = area_i(tau)
//! - least_i at least. The slowest round's idle rank time is N tau - sum_{S_1} a_i (S_1 its
//! samples, a_i their actual areas, their rank-tokens within N M), and a_i - p_i = least_i for
//! every sample (p_i its actual area past the least). So
//!   N * sum_k T_k >= sum_i least_i + sum_i p_i + idle_1
//!                 >= A + sum_i past_i(tau) + max(0, N tau - KS_tau(N M))
//! (idle_1 >= 0; and, trading S_1's p_i for their least areas, sum_{not S_1} past_i(tau) + N tau
//! - sum_{S_1} least_i, S_1 at most the knapsack of the areas area_i(tau) by least rank-tokens).
//! tau is unknown: the term is the least over tau >= the least time every sample can reach,
//! and since between two sizes' times the right side only grows with tau, over those times.
//! Whole groups (`whole_group_rows`, slowest_round.hpp): the knapsack above lets a sample's
//! spare tokens be filled by any other. In the slowest round every group has one size c, its
//! samples' times add up to at most tau and their rank-tokens to at most M. Let a group's leader
//! be its sample of most rank-tokens r_l on c (time t_l) and the others its fillers, and let
//! v_i = least_i + past_i(tau), which is at most c t_i(c) for any size c of time at most tau.
//! The round's fill sum_{S_1} v_i is the sum over its groups of v_l plus the fillers' v, and
//! the fillers' v is at most min(alpha (tau - t_l), beta (M - r_l)), alpha and beta the most v
//! per time on c (at most c) and per rank-token on c of any length of rank-tokens at most
//! min(r_l, M - r_l) and time at most tau - t_l; a group's v is also at most c tau. Each length
//! leads at most its count of groups, each on one size, and the groups' sizes add up to at most
//! N: the LP relaxation of that choice (per length, the upper hull of (c, value) with (0, 0);
//! its steps taken greedily by value per rank) bounds the fill, so each tau's charge is also at
//! least sum_i past_i(tau) + max(0, N tau - that fill). Between two consecutive legal times the
//! leaders, the fillers and the areas below tau do not change, and the fill grows by at most N
//! per unit of tau (a group's value by at most c), so the charge is least at an interval's
//! start; over a run of such intervals it is at least the charge at the run's start with the
//! areas of its end for what samples pay, those of its start for what they fill, the leaders
//! of its end and the fillers within its end. `least_charge` refines runs of intervals best
//! first from the bound of the fluid term and stops where no open run's bound is below the best
//! charge found (or at its work limit, with the least of those bounds).
//! Two-tier `long_tail/1024`: 22 samples of 131,072 tokens (2.835 s on 16 ranks, 1.643 s on
//! 32, beyond a node) cannot be joined in the slowest round by samples dense enough to fill it.
//! By tokens alone the term is least at tau = 2.687 s, the samples slower than that on 32 ranks
//! for 0.184 s of area: 18.8389 s, where the other terms reach 18.7255. With whole groups a
//! 131K sample on 32 ranks leaves half their tokens to samples that fill at most 19 of their
//! 32 ranks' time, and the charge is least at tau = 2.835 s, where the groups led by samples of
//! 95-128K tokens are filled only by short samples on 16 ranks: 19.0142 s.
//! Without heavy samples, forcing rounds, gaps or a slowest round it equals `lower_bound`.
template <workload_estimator Estimator>
double budget_lower_bound(const problem& pr, const Estimator& estimator) {
  const detail::budget_terms terms = detail::budget_bound_terms(pr, estimator);
  return std::max(terms.without_gaps, terms.gaps);
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
  const double overhead = microbatch_overhead(pr, estimator);
  const std::int32_t k_min = min_microbatches(pr);
  // (first: on a problem `tabulate_costs` never saw, this checks the costs)
  p.metrics.lower_bound = detail::lower_bound(pr, estimator, k_min);
  step += static_cast<double>(p.microbatches.size()) * overhead;
  // `tabulate_costs` keeps the overhead within what any plan of its problem can carry; a plan
  // evaluated on a problem it never saw, or with more micro-batches than samples, may not be
  if (!(step <= std::numeric_limits<double>::max())) [[unlikely]] {
    const detail::overhead_source source = detail::overhead_source_of(pr, estimator);
    throw error(source.code,
                fmt::format("{} = {}: the plan's {} micro-batches and their work cost {}, past "
                            "the largest double",
                            source.name, overhead, p.microbatches.size(), step));
  }
  p.metrics.estimated_step_time = step;
  p.metrics.efficiency = step > 0 ? p.metrics.lower_bound / step : 1.0;
  p.metrics.max_rank_load = load_max;
  const double slots = static_cast<double>(p.microbatches.size()) * p.world_size;
  p.metrics.mean_rank_load = slots > 0 ? load_sum / slots : 0.0;
  p.metrics.idle_rank_slots = idle;
  p.metrics.min_microbatches = k_min;
  p.metrics.microbatch_overhead = overhead;
}

} // namespace dcpp
