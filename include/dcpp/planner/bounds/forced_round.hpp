// The forced-round term of `budget_lower_bound` (docs/bounds.md section 3): the samples of
// longest least time each sit in some round, and a round holding a set of them pays at least the
// least charge over their sizes and groups; the rounds are the least-charge partition.
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

#include "dcpp/error.hpp"
#include "dcpp/planner/bounds/least_area.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp::detail {

//! How many big samples the forced-round term deals, each count a bound of its own (2^k rounds'
//! subsets, 3^k partitions): `budget_bound_terms` takes the largest. More is not always
//! tighter: a sample dealt as big leaves the fractional fill of the others, and a size's pieces
//! past six are dealt by bounds, not exactly (docs/bounds.md section 3 has cases either way).
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

//! One size a big sample may take in the forced-round search.
struct forced_round_option {
  double time;
  double area;
  double ranks;
  double tokens;    // per rank
  std::size_t size; // index in pr.cp_sizes
  friend bool operator==(const forced_round_option&, const forced_round_option&) = default;
};

//! tau(g) for g = 1..p of the p pieces of one size (times `times`, rank-tokens `tokens`): the
//! least slowest group when they are dealt into g groups within `budget` rank-tokens each,
//! infinite where no dealing fits. Exact by a subset DP up to `exact_pieces` pieces, a lower
//! bound past that (docs/bounds.md section 3). The vectors are scratch kept between calls.
class forced_round_dealer {
public:
  static constexpr std::size_t exact_pieces = 6;

  void deal(const std::vector<double>& times, const std::vector<double>& tokens, double budget,
            std::vector<double>& slowest) {
    const std::size_t p = times.size();
    slowest.assign(p, never);
    if (p <= exact_pieces)
      deal_exactly(times, tokens, budget, slowest);
    else
      deal_bound(times, tokens, budget, slowest);
  }

private:
  static constexpr double never = std::numeric_limits<double>::infinity();

  void deal_exactly(const std::vector<double>& times, const std::vector<double>& tokens,
                    double budget, std::vector<double>& slowest) {
    const std::size_t p = times.size();
    const std::size_t sets = std::size_t{1} << p;
    subset_time_.assign(sets, 0.0);
    subset_tokens_.assign(sets, 0.0);
    for (std::size_t set = 1; set < sets; ++set) {
      const auto low = static_cast<std::size_t>(std::countr_zero(set));
      subset_time_[set] = subset_time_[set & (set - 1)] + times[low];
      subset_tokens_[set] = subset_tokens_[set & (set - 1)] + tokens[low];
    }
    dealt_.assign(sets, never);
    dealt_[0] = 0;
    for (std::size_t g = 1; g <= p; ++g) {
      next_.assign(sets, never);
      next_[0] = 0;
      for (std::size_t set = 1; set < sets; ++set) {
        const std::size_t low = set & (~set + 1);
        for (std::size_t sub = set; sub != 0; sub = (sub - 1) & set)
          if ((sub & low) && subset_tokens_[sub] <= budget)
            next_[set] = std::min(next_[set], std::max(subset_time_[sub], dealt_[set ^ sub]));
      }
      dealt_.swap(next_);
      slowest[g - 1] = dealt_[sets - 1];
    }
  }

  static void deal_bound(const std::vector<double>& times, const std::vector<double>& tokens,
                         double budget, std::vector<double>& slowest) {
    const std::size_t p = times.size();
    std::vector<double> slow = times;
    std::sort(slow.begin(), slow.end(), std::greater<>());
    double time = 0;
    double all_tokens = 0;
    std::size_t wide = 0;
    for (std::size_t b = 0; b < p; ++b) {
      time += times[b];
      all_tokens += tokens[b];
      wide += 2 * tokens[b] > budget ? 1 : 0;
    }
    for (std::size_t g = 1; g <= p; ++g)
      if (all_tokens <= static_cast<double>(g) * budget && wide <= g)
        slowest[g - 1] =
            std::max({slow[0], time / static_cast<double>(g), g < p ? slow[g - 1] + slow[g] : 0.0});
  }

  std::vector<double> subset_time_, subset_tokens_, dealt_, next_;
};

//! The least charge of one round per set of big samples (docs/bounds.md section 3), searched
//! over their sizes (the least area first) and over how many groups each size's pieces take.
//! `options[k]`: big sample k's sizes, least area first; `alike[k]`: k has the options and least
//! area of k - 1 (the search gives alike samples their choices in order only: they charge the
//! same in any order); `yield[c]`: the most least area an other sample brings per area it takes
//! on size index c; `others`: the other samples' knapsack.
class forced_round_search {
public:
  forced_round_search(const std::vector<std::vector<forced_round_option>>& options,
                      const std::vector<bool>& alike, const std::vector<double>& big_least_area,
                      const std::vector<double>& yield, const least_area_knapsack& others,
                      std::size_t sizes, double world, double budget, std::int64_t most_visits)
      : options_(options), alike_(alike), least_area_(big_least_area), yield_(yield),
        others_(others), m_(options.size()), world_(world), budget_(budget),
        most_visits_(most_visits), chosen_(m_), chosen_index_(m_), dealings_(sizes << m_) {}

  //! The least charge of a round holding the big samples of `mask`, the others' fill `fill`:
  //! infinite where none fits the world.
  double charge(std::size_t mask, double fill) {
    members_.clear();
    for (std::size_t k = 0; k < m_; ++k)
      if ((mask >> k) & 1)
        members_.push_back(k);
    double best = std::numeric_limits<double>::infinity();
    search(0, 0.0, 0.0, fill, best);
    return best;
  }
  //! Whether the search passed its steps (the term is then dropped).
  [[nodiscard]] bool overran() const { return visits_ > most_visits_; }
  [[nodiscard]] std::int64_t visits() const { return visits_; }

private:
  struct size_class {
    const forced_round_option* first;
    double area = 0;
    const std::vector<double>* slowest = nullptr; // [g - 1]: least slowest group of g (or bound)
  };

  void search(std::size_t at, double area, double past, double fill, double& best) {
    if (past >= best || ++visits_ > most_visits_)
      return; // the charge is at least the area past the least
    if (at == members_.size()) {
      best = std::min(best, least_charge(at, area, past, fill));
      return;
    }
    const std::size_t k = members_[at];
    const double least = least_area_[k];
    const std::size_t from =
        at > 0 && members_[at - 1] + 1 == k && alike_[k] ? chosen_index_[at - 1] : 0;
    for (std::size_t x = from; x < options_[k].size(); ++x) {
      chosen_[at] = &options_[k][x];
      chosen_index_[at] = x;
      search(at + 1, area + chosen_[at]->area, past + std::max(0.0, chosen_[at]->area - least),
             fill, best);
    }
  }

  //! The chosen pieces grouped by size, each size's dealing worked out once per set of pieces.
  void make_classes(std::size_t count) {
    classes_.clear();
    for (std::size_t a = 0; a < count; ++a) {
      bool first = true; // the first piece of its size deals the size
      for (std::size_t b = 0; b < a && first; ++b)
        first = chosen_[b]->size != chosen_[a]->size;
      if (!first)
        continue;
      size_class sc{chosen_[a]};
      times_of_.clear();
      tokens_of_.clear();
      std::size_t set = 0;
      for (std::size_t b = a; b < count; ++b)
        if (chosen_[b]->size == chosen_[a]->size) {
          times_of_.push_back(chosen_[b]->time);
          tokens_of_.push_back(chosen_[b]->tokens);
          sc.area += chosen_[b]->area;
          set |= std::size_t{1} << members_[b];
        }
      const std::size_t key = (chosen_[a]->size << m_) | set;
      if (dealings_[key].empty())
        dealer_.deal(times_of_, tokens_of_, budget_, dealings_[key]);
      sc.slowest = &dealings_[key];
      classes_.push_back(sc);
    }
  }

  //! The least charge of the chosen pieces (area `area`, `past` of it past the least) over the
  //! counts of groups per size, or infinity where no dealing fits the world.
  double least_charge(std::size_t count, double area, double past, double fill) {
    make_classes(count);
    double least = std::numeric_limits<double>::infinity();
    groups_.assign(classes_.size(), 1);
    for (;;) {
      double ranks = 0;
      double t = area / world_;
      for (std::size_t c = 0; c < classes_.size(); ++c) {
        ranks += classes_[c].first->ranks * static_cast<double>(groups_[c]);
        t = std::max(t, (*classes_[c].slowest)[groups_[c] - 1]);
      }
      if (ranks <= world_ && t < std::numeric_limits<double>::infinity()) {
        // the free ranks (their time, and what fits their tokens), then the groups' gaps
        double fillable =
            std::min((world_ - ranks) * t, others_.carried((world_ - ranks) * budget_));
        for (std::size_t c = 0; c < classes_.size(); ++c)
          fillable +=
              yield_[classes_[c].first->size] *
              (classes_[c].first->ranks * static_cast<double>(groups_[c]) * t - classes_[c].area);
        least = std::min(least, past + world_ * t - area - std::min(fill, fillable));
      }
      std::size_t c = 0; // the next count of groups per size
      while (c < classes_.size() && groups_[c] == classes_[c].slowest->size())
        groups_[c++] = 1;
      if (c == classes_.size())
        break;
      ++groups_[c];
    }
    return least;
  }

  const std::vector<std::vector<forced_round_option>>& options_;
  const std::vector<bool>& alike_;
  const std::vector<double>& least_area_; // per big sample
  const std::vector<double>& yield_;
  const least_area_knapsack& others_;
  std::size_t m_;
  double world_, budget_;
  std::int64_t most_visits_;
  std::int64_t visits_ = 0;
  std::vector<std::size_t> members_;
  std::vector<const forced_round_option*> chosen_;
  std::vector<std::size_t> chosen_index_;     // in options_[members_[at]]
  std::vector<std::vector<double>> dealings_; // per size and set of big samples; empty: not yet
  std::vector<size_class> classes_;
  std::vector<double> times_of_, tokens_of_;
  std::vector<std::size_t> groups_;
  forced_round_dealer dealer_;
};

//! The sizes big sample k = 0..m-1 of `order` may take, least area first.
template <workload_estimator Estimator>
std::vector<std::vector<forced_round_option>>
forced_round_options(const problem& pr, const Estimator& estimator,
                     const std::vector<std::size_t>& order, std::size_t m) {
  std::vector<std::vector<forced_round_option>> options(m);
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
    std::sort(os.begin(), os.end(), [](const forced_round_option& a, const forced_round_option& b) {
      return a.area != b.area ? a.area < b.area : a.time < b.time;
    });
  return options;
}

//! The least total charge over the partitions of the big samples into rounds (a subset DP):
//! `charge[mask]` is a round's least charge holding the samples of `mask`.
inline double least_partition_charge(const std::vector<double>& charge) {
  const std::size_t subsets = charge.size();
  std::vector<double> best(subsets, std::numeric_limits<double>::infinity());
  best[0] = 0;
  for (std::size_t mask = 1; mask < subsets; ++mask) {
    const std::size_t low = mask & (~mask + 1);
    for (std::size_t sub = mask; sub != 0; sub = (sub - 1) & mask)
      if (sub & low)
        best[mask] = std::min(best[mask], charge[sub] + best[mask ^ sub]);
  }
  return best[subsets - 1];
}

//! The forced-round term of `budget_lower_bound` with the `most_big` samples of longest least
//! time as the big ones, before the micro-batch overhead; 0 where the batch has more legal sizes
//! than it examines or the search passes `steps_left` steps (it takes off those it took).
//! `inputs`: `forced_round_setup` for at least `most_big` samples (its order is by least time);
//! `least_area`, `least_tokens`: per sample over its legal sizes (rank-tokens: tokens per rank
//! x size); `total`: the sum of `least_area`.
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
  const auto options = forced_round_options(pr, estimator, order, m);
  std::vector<bool> alike(m, false);
  std::vector<double> big_least_area(m);
  for (std::size_t k = 0; k < m; ++k) {
    big_least_area[k] = least_area[order[k]];
    alike[k] =
        k > 0 && least_area[order[k]] == least_area[order[k - 1]] && options[k] == options[k - 1];
  }
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
  forced_round_search search(options, alike, big_least_area, yield, others, pr.cp_sizes.size(),
                             world, budget, steps_left);
  const std::size_t subsets = std::size_t{1} << m;
  std::vector<double> charge(subsets, std::numeric_limits<double>::infinity());
  for (std::size_t mask = 1; mask < subsets; ++mask) {
    double tokens = 0;
    for (std::size_t k = 0; k < m; ++k)
      if ((mask >> k) & 1)
        tokens += least_tokens[order[k]];
    if (tokens > capacity)
      continue; // never in one round
    charge[mask] = search.charge(mask, others.carried(capacity - tokens));
  }
  steps_left = std::max<std::int64_t>(0, steps_left - search.visits());
  if (search.overran())
    return 0;
  return (total + least_partition_charge(charge)) / world;
}

} // namespace dcpp::detail
