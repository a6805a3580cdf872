// The levelled construction's inputs: each sample as a slot in the order the rounds visit them,
// the reach of one run, the raise of a slot above the round's level, and the halving of rounds
// to the micro-batch multiple.
#pragma once

#include "dcpp/planner/cost_rows.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/balanced/cp_sizes.hpp"
#include "dcpp/planner/packing/balanced/tuning.hpp"
#include "dcpp/planner/util/indexed_heap.hpp"
#include "dcpp/planner/util/sort.hpp"
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

namespace dcpp::detail {

//! One sample as the levelled construction sees it, stored in the order it visits them
//! (descending work per token): a round's scan reads these one after another instead of
//! fetching each sample's fields from arrays indexed by sample id, its costliest reads (see
//! docs/benchmarks.md, "balanced: how the numbers were chosen").
struct levelled_slot {
  double cost = 0;      // at `cp`
  double per_token = 0; // work per rank token at the least-area size
  std::int64_t length = 0;
  std::int64_t tokens = 0; // per rank at `cp`
  std::int32_t id = 0;
  std::int32_t row = 0; // cost row
  std::int32_t cp = 1;
  std::int32_t min_cp = 1;
  std::int32_t reach_from = 0; // the size `reach` was worked out from (0: not yet)
  std::int32_t reach = 0;      // the largest size its search looks at from `reach_from`
};

//! What every levelled run starts from: the samples at the least-area sizes, by work per token.
struct levelled_start {
  std::vector<levelled_slot> slots; // descending work per token, then descending length, then id
  std::int64_t min_tokens = 0;      // the fewest rank tokens of any sample
  std::int64_t rank_tokens = 0;     // sum of rank tokens x CP size
};

//! The start at `sizes` (which give every sample of a cost row the same size). Worked out and
//! sorted once per row; each row's samples then follow in ascending id, which is where a sort of
//! every sample by (key, id) puts them (rows differ in length, so in key).
template <class Estimator>
[[nodiscard]] levelled_start levelled_inputs(const cost_rows<Estimator>& costs,
                                             const sample_sizes& sizes) {
  const problem& pr = costs.batch();
  const std::size_t rows = costs.rows();
  levelled_start out;
  out.min_tokens = costs.budget();
  std::vector<double> row_per_token(rows);
  std::vector<std::int64_t> row_tokens(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t first = costs.first_sample(r);
    const auto uf = static_cast<std::size_t>(first);
    row_tokens[r] = costs.tokens(first, sizes.cp[uf]);
    row_per_token[r] = sizes.cost[uf] / static_cast<double>(row_tokens[r]);
    out.min_tokens = std::min(out.min_tokens, row_tokens[r]);
  }
  // the samples of each row, ascending (a counting sort by row)
  std::vector<std::int32_t> start(rows + 1, 0);
  for (std::int32_t s = 0; s < costs.samples(); ++s) {
    const auto us = static_cast<std::size_t>(s);
    const auto r = static_cast<std::size_t>(costs.row_of(s));
    DCPP_EXPECTS(sizes.cp[us] == sizes.cp[static_cast<std::size_t>(costs.first_sample(r))]);
    ++start[r + 1];
    out.rank_tokens += row_tokens[r] * sizes.cp[us];
  }
  for (std::size_t r = 0; r < rows; ++r)
    start[r + 1] += start[r];
  std::vector<std::int32_t> members(pr.size());
  std::vector<std::int32_t> next(start.begin(), start.end() - 1);
  for (std::int32_t s = 0; s < costs.samples(); ++s)
    members[static_cast<std::size_t>(next[static_cast<std::size_t>(costs.row_of(s))]++)] = s;
  std::vector<std::int32_t> firsts(rows);
  for (std::size_t r = 0; r < rows; ++r)
    firsts[r] = costs.first_sample(r);
  sort_ids_by_key(firsts, [&](std::int32_t a) {
    const auto r = static_cast<std::size_t>(costs.row_of(a));
    return std::pair(-row_per_token[r], -pr.lengths[static_cast<std::size_t>(a)]);
  });
  out.slots.resize(pr.size());
  std::size_t k = 0;
  for (const std::int32_t f : firsts) {
    const std::int32_t r = costs.row_of(f);
    const auto ur = static_cast<std::size_t>(r);
    for (auto m = start[ur]; m < start[ur + 1]; ++m) {
      const std::int32_t s = members[static_cast<std::size_t>(m)];
      const auto us = static_cast<std::size_t>(s);
      levelled_slot& x = out.slots[k++];
      x.cost = sizes.cost[us];
      x.per_token = row_per_token[ur];
      x.row = r;
      x.length = pr.lengths[us];
      x.id = s;
      x.cp = sizes.cp[us];
      x.tokens = row_tokens[ur];
      x.min_cp = pr.min_cp_of[us];
    }
  }
  return out;
}

//! How one levelled run reaches for larger groups.
struct levelled_reach {
  //! A sample joins a group of a larger size where it costs at most this factor of its area.
  double area = 1.05;
  //! A sample costing more than this share of its round's level joins no group (it opens one
  //! on free ranks or waits for the next round); 0: off.
  double heavy_share = 0;
  //! End a round once no sample left can join it (checked after long runs of misses) instead
  //! of scanning the rest: the same rounds, faster (false only to prove that in a test).
  bool end_rounds_early = true;
  //! A sample above its round's level moves to a larger group when its area grows at most by
  //! this factor; 0: `balanced_tuning::raise_area`.
  double raise_area = 0;
  //! A sample that fits no group within the reach may ride in a larger group whose load stays
  //! at or below the round's maximum with it (the round is no slower; its slack, which no
  //! sample of the group's size is left to fill, carries work that later rounds lose).
  bool free_ride = false;
  //! Defer a row's samples together once one of them misses while all are alike (see
  //! `levelled`): the same rounds, faster (false only to prove that in a test).
  bool skip_alike = true;
};

namespace levelled_detail {

//! Moves slot x to a larger CP size when its cost exceeds `level` and a larger group brings it
//! to the level (or as close as the ladder goes) for at most `raise_area` times its rank area.
//! Each step up may leave `(new cp - old cp) x budget` rank tokens unused: it is paid from
//! `spare_tokens`, the rank tokens the allowed rounds hold beyond what the samples need.
template <class Estimator>
void raise_to_level(levelled_slot& x, double level, std::int64_t& spare_tokens,
                    const cost_rows<Estimator>& costs, double raise_area) {
  if (x.cost <= level)
    return;
  const double area = x.cost * x.cp;
  for (const std::int32_t c :
       ladder_between(costs.batch(), x.min_cp, costs.options().effective_max_cp())) {
    if (c <= x.cp)
      continue;
    const double w = costs.row_cost(x.row, c);
    const std::int64_t price = std::int64_t{c - x.cp} * costs.budget();
    if (w * c > raise_area * area || w >= x.cost || price > spare_tokens)
      break;
    spare_tokens -= price;
    x.cp = c;
    x.cost = w;
    x.tokens = tokens_per_rank(costs.options(), x.length, c);
    if (w <= level)
      break;
  }
}

//! Raises the round count to the micro-batch multiple by halving rounds inside their groups:
//! the round with the largest maximum load among those with a group of two samples or more
//! becomes two rounds on the same groups (same ranks), each group's samples dealt to the halves
//! by longest processing time; a group of one sample goes whole to the half with less area so
//! far. Every rank that worked keeps working and the halves carry about half the load each,
//! where `split_to_multiple`'s split by groups leaves half the ranks idle in both halves and the
//! local search then moves samples back one at a time (docs/benchmarks.md, scaling corners, has
//! what that cost in planning time). Rounds of single
//! samples only are left to `split_to_multiple`. Used where the groups average at least
//! `balanced_tuning::halve_samples_per_group` samples (see there).
template <class Estimator>
void halve_to_multiple(std::vector<microbatch_state>& rounds, const cost_rows<Estimator>& costs) {
  const plan_options& o = costs.options();
  const auto multiple = static_cast<std::size_t>(o.microbatch_multiple);
  std::vector<std::pair<double, std::int32_t>> dealt; // (cost, sample) of one group
  while (rounds.size() % multiple != 0) {
    std::optional<std::size_t> pick;
    double pick_max = 0;
    for (std::size_t m = 0; m < rounds.size(); ++m) {
      double max_load = 0;
      bool splittable = false;
      for (const auto& g : rounds[m].groups()) {
        max_load = std::max(max_load, g.load);
        splittable = splittable || g.samples.size() >= 2;
      }
      if (splittable && (!pick || max_load > pick_max)) {
        pick = m;
        pick_max = max_load;
      }
    }
    if (!pick)
      break;
    microbatch_state halves[2] = {microbatch_state(costs.world()), microbatch_state(costs.world())};
    double area[2] = {0, 0};
    for (const auto& g : rounds[*pick].groups()) {
      if (g.samples.empty())
        continue;
      if (g.samples.size() == 1) {
        const int h = area[0] <= area[1] ? 0 : 1;
        const std::int32_t id = halves[h].open(g.first_rank, g.cp);
        halves[h].add(id, g.samples.front(), g.tokens, g.load);
        area[h] += g.load * g.cp;
        continue;
      }
      dealt.clear();
      for (const std::int32_t s : g.samples)
        dealt.emplace_back(costs.cost(s, g.cp), s);
      std::stable_sort(dealt.begin(), dealt.end(),
                       [](const auto& x, const auto& y) { return x.first > y.first; });
      const std::int32_t ids[2] = {halves[0].open(g.first_rank, g.cp),
                                   halves[1].open(g.first_rank, g.cp)};
      double load[2] = {0, 0};
      for (const auto& [w, s] : dealt) {
        const int h = load[0] <= load[1] ? 0 : 1;
        halves[h].add(ids[h], s, costs.tokens(s, g.cp), w);
        load[h] += w;
      }
      area[0] += load[0] * g.cp;
      area[1] += load[1] * g.cp;
    }
    rounds[*pick] = std::move(halves[0]);
    rounds.insert(rounds.begin() + static_cast<std::ptrdiff_t>(*pick) + 1, std::move(halves[1]));
  }
  split_to_multiple(rounds, o.microbatch_multiple, costs.batch(), costs.estimator(),
                    /*grow=*/false);
}

} // namespace levelled_detail

} // namespace dcpp::detail
