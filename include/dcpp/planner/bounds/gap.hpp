// The gap term of `budget_lower_bound` (budget_lower_bound.hpp; docs/bounds.md section 4): samples
// of one smallest CP size, each in a round with a slower one, leave gaps on their groups that the
// other samples fill at a loss, unless the plan pays for more micro-batches.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp::detail {

//! `budget_lower_bound` works the gap term out where the options allow at most this many sizes.
inline constexpr std::size_t gap_bound_most_sizes = 64;

//! What `gap_bound` knows of each length (one row per length, `group_by_length`'s rows):
//! the least area over the legal sizes, and the time on the size of least area (the least time
//! among sizes of equal area): its own time.
struct length_least {
  double area = std::numeric_limits<double>::infinity();
  double own_time = std::numeric_limits<double>::infinity();

  //! Takes the size `cp`, of time `w`, where its area is less, or equal and its time less.
  void take(double w, std::int32_t cp) noexcept {
    if (w * cp < area || (w * cp == area && w < own_time)) {
      area = w * cp;
      own_time = w;
    }
  }
};

//! Sample i's least area over its legal sizes (and its own time, there).
template <workload_estimator Estimator>
length_least least_of_sample(const problem& pr, const Estimator& estimator, std::size_t i) {
  length_least least;
  for (const std::int32_t cp : pr.cp_sizes)
    if (cp >= pr.min_cp_of[i])
      least.take(sample_cost(pr, estimator, i, cp), cp);
  return least;
}

//! The lengths as the gap term reads them, worked out once per batch: each sample's row and a
//! sample of each row (the problem's cost rows, or `group_by_length`'s), each row's least area
//! and own time and number of samples, the rows of each smallest size of at least 2 (`classes`,
//! ascending by size), and the sum of every sample's least area.
struct gap_rows {
  length_rows own; // the rows where the problem has none
  std::span<const std::int32_t> row_of, first_of;
  std::vector<length_least> least;
  std::vector<std::size_t> count;
  std::vector<std::pair<std::int32_t, std::vector<std::size_t>>> classes;
  double total = 0;

  gap_rows() = default;
  gap_rows(const gap_rows&) = delete; // the spans may refer to `own`
  gap_rows& operator=(const gap_rows&) = delete;
};

//! `rows`' lengths and counts for `pr` (the least areas and own times left to the caller), and
//! `finish_gap_rows` the classes and total once they are in.
inline void start_gap_rows(const problem& pr, gap_rows& rows) {
  if (pr.cost_row.empty())
    rows.own = group_by_length(pr);
  rows.row_of = pr.cost_row.empty() ? std::span<const std::int32_t>(rows.own.row)
                                    : std::span<const std::int32_t>(pr.cost_row);
  rows.first_of = pr.cost_row.empty() ? std::span<const std::int32_t>(rows.own.row_sample)
                                      : std::span<const std::int32_t>(pr.row_sample);
  rows.least.assign(rows.first_of.size(), length_least{});
  rows.count.assign(rows.first_of.size(), 0);
  for (const std::int32_t r : rows.row_of)
    ++rows.count[static_cast<std::size_t>(r)];
}
inline void finish_gap_rows(const problem& pr, gap_rows& rows) {
  rows.total = 0;
  for (const std::int32_t r : rows.row_of)
    rows.total += rows.least[static_cast<std::size_t>(r)].area;
  std::vector<std::vector<std::size_t>> by_size(
      pr.cp_sizes.empty() ? 0 : static_cast<std::size_t>(pr.cp_sizes.back()) + 1);
  for (std::size_t r = 0; r < rows.first_of.size(); ++r)
    by_size[static_cast<std::size_t>(pr.min_cp_of[static_cast<std::size_t>(rows.first_of[r])])]
        .push_back(r);
  rows.classes.clear();
  for (std::size_t c = 2; c < by_size.size(); ++c)
    if (!by_size[c].empty())
      rows.classes.emplace_back(static_cast<std::int32_t>(c), std::move(by_size[c]));
}

//! The gap term's rows of `pr`, each row's least area and own time worked out here.
template <workload_estimator Estimator>
void make_gap_rows(const problem& pr, const Estimator& estimator, gap_rows& rows) {
  start_gap_rows(pr, rows);
  for (std::size_t r = 0; r < rows.first_of.size(); ++r) {
    rows.least[r] = least_of_sample(pr, estimator, static_cast<std::size_t>(rows.first_of[r]));
  }
  finish_gap_rows(pr, rows);
}

//! Every sample of every length on every legal size, by time: the fillers of `gap_bound`.
struct gap_fillers {
  struct entry {
    double time;
    std::int64_t tokens; // per rank
    double yield;        // least area over area on this size
    std::size_t row;
  };
  std::vector<std::vector<entry>> by_size; // per index in pr.cp_sizes
};

template <workload_estimator Estimator>
gap_fillers make_gap_fillers(const problem& pr, const Estimator& estimator, const gap_rows& rows) {
  const std::span<const std::int32_t> first_of = rows.first_of;
  const std::vector<length_least>& least = rows.least;
  gap_fillers all;
  all.by_size.resize(pr.cp_sizes.size());
  for (std::size_t c = 0; c < pr.cp_sizes.size(); ++c) {
    const std::int32_t cp = pr.cp_sizes[c];
    for (std::size_t r = 0; r < first_of.size(); ++r) {
      const auto i = static_cast<std::size_t>(first_of[r]);
      if (cp >= pr.min_cp_of[i]) {
        const double w = sample_cost(pr, estimator, i, cp);
        all.by_size[c].push_back(
            {w, pr.rank_tokens(i, cp), w > 0 ? std::min(1.0, least[r].area / (w * cp)) : 1.0, r});
      }
    }
    std::sort(all.by_size[c].begin(), all.by_size[c].end(),
              [](const gap_fillers::entry& a, const gap_fillers::entry& b) {
                return a.time != b.time ? a.time < b.time : a.row < b.row;
              });
  }
  return all;
}

//! One class's gap term: the bound on the step time with the micro-batch overhead (0 where it
//! has nothing to say), and the rounds of its best number: the members (sample ids) each round
//! serves, slowest first; a member in no run is best on a faster size.
struct gap_class {
  std::int32_t smallest = 0;
  double bound = 0;
  std::vector<std::vector<std::int32_t>> runs;
};

//! One legal size of a member row in the gap term: its time, area past the least, and the least
//! charge of the gaps from each step of the fillers' best yield on (the steps' start, and the
//! least charge from there on).
struct gap_option {
  double time;
  double past;
  double ranks;
  bool shared;               // another member fits beside: only `past` is charged
  std::vector<double> steps; // gap lengths where the best yield rises
  std::vector<double> yields;
  std::vector<double> least_from; // least charge at a step or a later one
};

//! The fillers per size for a class: every other sample legal there, by time; those of times
//! within `merge_within` of each other as one, of their least time and tokens and their best
//! yield (it fits and yields wherever one of them does, so the gaps' charge only falls; a few
//! hundred per size instead of one per length).
inline std::vector<std::vector<gap_fillers::entry>>
gap_class_fillers(const gap_fillers& all, const std::vector<std::size_t>& count,
                  const std::vector<std::size_t>& in_class) {
  constexpr double merge_within = 1.0 / 128;
  std::vector<std::vector<gap_fillers::entry>> fillers(all.by_size.size());
  for (std::size_t c = 0; c < all.by_size.size(); ++c)
    for (const gap_fillers::entry& f : all.by_size[c]) {
      if (count[f.row] == in_class[f.row])
        continue; // every sample of this length is a member
      std::vector<gap_fillers::entry>& fs = fillers[c];
      if (!fs.empty() && f.time <= fs.back().time * (1 + merge_within)) {
        fs.back().tokens = std::min(fs.back().tokens, f.tokens);
        fs.back().yield = std::max(fs.back().yield, f.yield);
      } else {
        fs.push_back(f);
      }
    }
  return fillers;
}

//! Member row `r`'s option on size `cp` (index `c`), sample `i` of it.
template <workload_estimator Estimator>
gap_option make_gap_option(const problem& pr, const Estimator& estimator, std::size_t r,
                           std::size_t i, std::size_t c, const gap_rows& lengths,
                           const std::vector<std::size_t>& member_rows,
                           const std::vector<std::size_t>& in_class,
                           const std::vector<gap_fillers::entry>& fillers) {
  const std::int32_t cp = pr.cp_sizes[c];
  gap_option o{sample_cost(pr, estimator, i, cp), 0.0, static_cast<double>(cp), false, {}, {}, {}};
  o.past = std::max(0.0, o.time * cp - lengths.least[r].area);
  const std::int64_t room = pr.options.max_tokens_per_rank - pr.rank_tokens(i, cp);
  for (const std::size_t q : member_rows)
    if ((q != r || in_class[r] > 1) && in_class[q] > 0 &&
        pr.rank_tokens(static_cast<std::size_t>(lengths.first_of[q]), cp) <= room)
      o.shared = true;
  if (o.shared)
    return o;
  double best = 0;
  for (const gap_fillers::entry& f : fillers) {
    if (best >= 1)
      break;
    if (f.tokens <= room && f.yield > best) {
      best = f.yield;
      o.steps.push_back(f.time);
      o.yields.push_back(best);
      o.least_from.push_back(o.past + o.ranks * f.time * (1 - best));
    }
  }
  for (std::size_t s = o.least_from.size(); s-- > 1;)
    o.least_from[s - 1] = std::min(o.least_from[s - 1], o.least_from[s]);
  return o;
}

//! The least charge of a member with options `options` in a round of time t >= its own time, or
//! in any later round (never more than `faster`: a faster size in a round below its own time).
inline double gap_charge(const std::vector<gap_option>& options, double faster, double t) {
  double least_charge = faster;
  for (const gap_option& o : options) {
    if (o.shared || o.time > t) {
      least_charge = std::min(least_charge, o.past);
      continue;
    }
    const double gap = t - o.time;
    const auto s = static_cast<std::size_t>(std::upper_bound(o.steps.begin(), o.steps.end(), gap) -
                                            o.steps.begin());
    const double yield = s > 0 ? o.yields[s - 1] : 0.0;
    least_charge = std::min(least_charge, o.past + o.ranks * gap * (1 - yield));
    if (s < o.least_from.size())
      least_charge = std::min(least_charge, o.least_from[s]);
  }
  return least_charge;
}

//! The DP over runs of members (docs/bounds.md section 4): `cost[s][p - s]` is member p served
//! by a round at member s's own time, `faster[p]` what member p pays before the first round.
//! Gives the bound (with the overhead of max(k, `fewest`) rounds), its number of rounds `k` and
//! `from[k][j]`, where the last run of the first j members ends when k rounds serve them.
struct gap_rounds {
  double bound = 0;
  std::size_t k = 0;
  std::vector<std::vector<std::size_t>> from;
};

inline gap_rounds least_gap_rounds(const std::vector<std::vector<double>>& cost,
                                   const std::vector<double>& faster, double total, double world,
                                   std::int64_t fewest, double overhead) {
  constexpr double never = std::numeric_limits<double>::infinity();
  const std::size_t m = cost.size();
  // served[j]: the least charge of the first j members with k rounds' times placed (the members
  // before the first round pay `faster`), for k = 0, 1, ...
  std::vector<double> served(m + 1, 0.0);
  std::vector<double> next(m + 1);
  gap_rounds out;
  out.from.resize(1);
  for (std::size_t j = 0; j < m; ++j)
    served[j + 1] = served[j] + faster[j];
  const auto fewest_rounds = static_cast<double>(fewest);
  out.bound = (total + served[m]) / world + fewest_rounds * overhead;
  double least_served = served[m];
  std::size_t least_k = 0; // the k of least_served
  for (std::size_t k = 1; k <= m; ++k) {
    const double rounds = std::max(static_cast<double>(k), fewest_rounds);
    if (total / world + rounds * overhead >= out.bound)
      break; // more rounds cost more than any charge they could save
    std::fill(next.begin(), next.end(), never);
    std::vector<std::size_t>& last = out.from.emplace_back(m + 1, 0);
    for (std::size_t s = 0; s < m; ++s) {
      if (served[s] == never)
        continue;
      double sum = 0;
      for (std::size_t j = s; j < m; ++j) {
        sum += cost[s][j - s];
        if (served[s] + sum < next[j + 1]) {
          next[j + 1] = served[s] + sum;
          last[j + 1] = s;
        }
      }
    }
    served.swap(next);
    if (served[m] < least_served) {
      least_served = served[m];
      least_k = k;
    }
    if (const double bound = (total + least_served) / world + rounds * overhead;
        bound < out.bound) {
      out.bound = bound;
      out.k = least_k;
    }
  }
  return out;
}

//! The gap term for the samples whose smallest legal size is `smallest` (the class, its rows
//! `member_rows`; at most `most_members` of them, the slowest by own time). `lengths`: the batch's
//! rows; `all`: `make_gap_fillers`'s table; `fewest`: the fewest rounds any plan has.
//! docs/bounds.md section 4 has the proof.
template <workload_estimator Estimator>
gap_class gap_bound(const problem& pr, const Estimator& estimator, std::int32_t smallest,
                    std::vector<std::size_t> member_rows, const gap_rows& lengths,
                    const gap_fillers& all, std::int64_t fewest, double overhead) {
  constexpr std::size_t most_members = 128;
  constexpr double never = std::numeric_limits<double>::infinity();
  const std::span<const std::int32_t> row_of = lengths.row_of, first_of = lengths.first_of;
  const std::vector<length_least>& least = lengths.least;
  const std::vector<std::size_t>& count = lengths.count;
  const std::size_t rows = first_of.size();
  // the members: the class's samples by own time, slowest first (as rows with counts)
  std::sort(member_rows.begin(), member_rows.end(), [&](std::size_t a, std::size_t b) {
    return least[a].own_time != least[b].own_time ? least[a].own_time > least[b].own_time : a < b;
  });
  std::vector<std::size_t> in_class(rows, 0); // members per row
  std::vector<std::size_t> members;           // per member: its row, slowest first
  for (const std::size_t r : member_rows)
    for (std::size_t k = 0; k < count[r] && members.size() < most_members; ++k) {
      members.push_back(r);
      ++in_class[r];
    }
  gap_class out{smallest, 0.0, {}};
  if (members.size() < 2 || !(overhead > 0))
    return out;
  const auto fillers = gap_class_fillers(all, count, in_class);
  std::vector<std::vector<gap_option>> options(rows);
  std::vector<double> faster(rows, never); // least `past` of a size faster than its own time
  for (const std::size_t r : member_rows) {
    if (in_class[r] == 0)
      continue;
    const auto i = static_cast<std::size_t>(first_of[r]);
    for (std::size_t c = 0; c < pr.cp_sizes.size(); ++c) {
      if (pr.cp_sizes[c] < smallest)
        continue;
      gap_option o =
          make_gap_option(pr, estimator, r, i, c, lengths, member_rows, in_class, fillers[c]);
      if (o.time < least[r].own_time)
        faster[r] = std::min(faster[r], o.past);
      options[r].push_back(std::move(o));
    }
  }
  // cost[s][p - s]: member p served by a round at member s's own time (s <= p)
  const std::size_t m = members.size();
  std::vector<std::vector<double>> cost(m);
  std::vector<double> member_faster(m);
  for (std::size_t s = 0; s < m; ++s) {
    member_faster[s] = faster[members[s]];
    cost[s].resize(m - s);
    for (std::size_t p = s; p < m; ++p)
      cost[s][p - s] =
          s > 0 && members[s] == members[s - 1] && p > s
              ? cost[s - 1][p - s + 1]
              : gap_charge(options[members[p]], faster[members[p]], least[members[s]].own_time);
  }
  const gap_rounds best =
      least_gap_rounds(cost, member_faster, lengths.total, pr.options.world_size, fewest, overhead);
  out.bound = best.bound;
  // the runs of the bound, as sample ids (a row's members are its first samples)
  std::vector<std::vector<std::int32_t>> samples_of(rows);
  for (std::size_t i = 0; i < row_of.size(); ++i)
    if (const auto r = static_cast<std::size_t>(row_of[i]); samples_of[r].size() < in_class[r])
      samples_of[r].push_back(static_cast<std::int32_t>(i));
  std::vector<std::size_t> taken(rows, 0);
  std::vector<std::int32_t> sample_of(m);
  for (std::size_t p = 0; p < m; ++p)
    sample_of[p] = samples_of[members[p]][taken[members[p]]++];
  std::size_t end = m;
  for (std::size_t k = best.k; k > 0; --k) {
    const std::size_t begin = best.from[k][end];
    out.runs.emplace_back(sample_of.begin() + static_cast<std::ptrdiff_t>(begin),
                          sample_of.begin() + static_cast<std::ptrdiff_t>(end));
    end = begin;
  }
  std::reverse(out.runs.begin(), out.runs.end());
  return out;
}

//! Whether the gap term has anything to say: samples, at most `gap_bound_most_sizes` sizes and
//! a positive micro-batch overhead.
inline bool gap_term_applies(const problem& pr, double overhead) {
  return pr.size() > 0 && pr.cp_sizes.size() <= gap_bound_most_sizes && overhead > 0;
}

//! Every class's gap term (each smallest legal size of at least 2 that some sample has; none
//! past `gap_bound_most_sizes` sizes): `budget_lower_bound`'s gap term is the largest, and
//! `balanced`'s chunked construction builds each class's runs. `rows`: the batch's lengths
//! (`make_gap_rows`, or `budget_lower_bound`'s own); `fewest`: the fewest rounds any plan has;
//! `overhead`: the micro-batch overhead.
template <workload_estimator Estimator>
std::vector<gap_class> gap_classes(const problem& pr, const Estimator& estimator,
                                   const gap_rows& rows, std::int64_t fewest, double overhead) {
  std::vector<gap_class> out;
  if (!gap_term_applies(pr, overhead) || rows.classes.empty())
    return out;
  const gap_fillers fillers = make_gap_fillers(pr, estimator, rows);
  for (const auto& [smallest, members] : rows.classes)
    out.push_back(gap_bound(pr, estimator, smallest, members, rows, fillers, fewest, overhead));
  return out;
}

//! The same, the lengths worked out here.
template <workload_estimator Estimator>
std::vector<gap_class> gap_classes(const problem& pr, const Estimator& estimator,
                                   std::int64_t fewest, double overhead) {
  if (!gap_term_applies(pr, overhead))
    return {};
  gap_rows rows;
  make_gap_rows(pr, estimator, rows);
  return gap_classes(pr, estimator, rows, fewest, overhead);
}

} // namespace dcpp::detail
