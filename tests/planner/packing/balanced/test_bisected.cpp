// Tests for balanced/bisected.hpp: a round's halving against an exhaustive search written here,
// its groups checked independently, and the bisected rounds of seeded random batches (every
// member once, no empty round, the search never slower than the deal it starts from).
#include "../../../support.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "dcpp/planner/packing/balanced/bisected.hpp"
#include "dcpp/workload/generators.hpp"
#include "parts.hpp"

namespace {
using namespace dcpp_test::balanced_parts;
namespace d = dcpp::detail;
using halving = d::bisector<estimator>;

// the sanitizer build (DCPP_TESTS_QUICK) checks fewer batches
using dcpp_test::quick;

// uniform in [0, n)
std::uint64_t below(dcpp::workload::rng& r, std::uint64_t n) {
  return static_cast<std::uint64_t>(r.uniform_int(0, static_cast<std::int64_t>(n) - 1));
}

// The two blocks a block of `ranks` halves into, as the construction documents it: equal halves
// of a power of two, else (aligned) the largest power of two below and the rest, or (contiguous)
// the larger and the smaller half; none below 2 ranks or below the smallest legal size.
std::optional<std::pair<std::int32_t, std::int32_t>> halves_of(const dcpp::plan_options& o,
                                                               std::int32_t ranks) {
  if (ranks < 2)
    return std::nullopt;
  std::int32_t lo = ranks - ranks / 2;
  if (o.group_topology == dcpp::topology::aligned) {
    lo = 1;
    while (lo * 2 <= ranks)
      lo *= 2;
    if (lo == ranks)
      lo /= 2;
  }
  if (lo < o.min_cp || ranks - lo < o.min_cp)
    return std::nullopt;
  return std::pair{lo, ranks - lo};
}

// The fastest way to place `members` on `ranks` ranks from `first` by one group or by halving,
// every split of the members tried at every level (no pruning, no memory): exponential, for the
// small batches below only.
double exhaustive(const batch& b, const std::vector<std::int32_t>& members, std::int32_t first,
                  std::int32_t ranks) {
  const dcpp::problem& pr = b.pr;
  if (members.empty())
    return 0;
  double best = std::numeric_limits<double>::infinity();
  if (dcpp::is_legal_group(pr.options, first, ranks)) {
    std::int64_t tokens = 0;
    double load = 0;
    bool fits = true;
    for (const std::int32_t s : members) {
      const auto us = static_cast<std::size_t>(s);
      if (pr.min_cp_of[us] > ranks) {
        fits = false;
        break;
      }
      tokens += pr.rank_tokens(us, ranks);
      load += dcpp::sample_cost(pr, b.e, us, ranks);
    }
    if (fits && tokens <= pr.options.max_tokens_per_rank)
      best = load;
  }
  if (const auto h = halves_of(pr.options, ranks)) {
    const std::size_t n = members.size();
    for (std::uint32_t mask = 0; mask < (1u << n); ++mask) {
      std::vector<std::int32_t> a, c;
      for (std::size_t i = 0; i < n; ++i)
        ((mask >> i) & 1u ? c : a).push_back(members[i]);
      best = std::min(best, std::max(exhaustive(b, a, first, h->first),
                                     exhaustive(b, c, first + h->first, h->second)));
    }
  }
  return best;
}

// The groups of a split: legal, inside the block, disjoint, every member once, within the token
// budget; the split's time is their largest load, worked out here.
void check_split(const batch& b, const halving::split& s, const std::vector<std::int32_t>& members,
                 std::int32_t first, std::int32_t ranks) {
  const dcpp::problem& pr = b.pr;
  std::vector<int> owner(static_cast<std::size_t>(pr.options.world_size), 0);
  std::multiset<std::int32_t> seen;
  double slowest = 0;
  for (const dcpp::plan_group& g : s.groups) {
    CHECK(dcpp::is_legal_group(pr.options, g.first_rank, g.cp));
    CHECK(g.first_rank >= first);
    CHECK(g.first_rank + g.cp <= first + ranks);
    for (std::int32_t r = g.first_rank; r < g.first_rank + g.cp; ++r)
      CHECK(++owner[static_cast<std::size_t>(r)] == 1);
    std::int64_t tokens = 0;
    double load = 0;
    for (const std::int32_t m : g.samples) {
      seen.insert(m);
      const auto us = static_cast<std::size_t>(m);
      CHECK(pr.min_cp_of[us] <= g.cp);
      tokens += pr.rank_tokens(us, g.cp);
      load += dcpp::sample_cost(pr, b.e, us, g.cp);
    }
    CHECK(tokens <= pr.options.max_tokens_per_rank);
    slowest = std::max(slowest, load);
  }
  CHECK(seen == std::multiset<std::int32_t>(members.begin(), members.end()));
  CHECK(s.time == doctest::Approx(slowest).epsilon(1e-12));
}

// A round's time: its slowest group's load, summed here from the estimator's costs.
double slowest_group(const batch& b, const dcpp::plan_microbatch& mb) {
  double slowest = 0;
  for (const dcpp::plan_group& g : mb.groups) {
    double load = 0;
    for (const std::int32_t m : g.samples)
      load += dcpp::sample_cost(b.pr, b.e, static_cast<std::size_t>(m), g.cp);
    slowest = std::max(slowest, load);
  }
  return slowest;
}

// Options of a small random batch whose samples mostly need CP: 4-`widest` ranks, aligned or
// contiguous, budgets of 1-4K tokens.
dcpp::plan_options small_options(dcpp::workload::rng& r, std::int32_t widest = 24) {
  dcpp::plan_options o;
  o.world_size = static_cast<std::int32_t>(4 + below(r, static_cast<std::uint64_t>(widest) - 3));
  o.max_tokens_per_rank = 1024 << below(r, 3);
  o.group_topology = below(r, 2) == 0 ? dcpp::topology::aligned : dcpp::topology::contiguous;
  o.padding_unit = below(r, 3) == 0 ? 8 : 1;
  return o;
}

std::vector<std::int64_t> long_lengths(dcpp::workload::rng& r, const dcpp::plan_options& o,
                                       std::size_t n) {
  // a quarter of the world's tokens at most each: from a few ranks' worth to many
  const std::int64_t top = std::int64_t{o.world_size} * o.max_tokens_per_rank / 4;
  std::vector<std::int64_t> lengths(n);
  for (auto& l : lengths)
    l = 1 + static_cast<std::int64_t>(below(r, static_cast<std::uint64_t>(top)));
  return lengths;
}
} // namespace

TEST_CASE("bisector: every split tried, it finds the exhaustive search's time; four, no faster") {
  int compared = 0, finite = 0, slower = 0;
  for (std::uint64_t seed = 1; seed <= (quick() ? 80U : 300U); ++seed) {
    CAPTURE(seed);
    dcpp::workload::rng r(seed);
    const dcpp::plan_options o = small_options(r, 16);
    const std::size_t n = 1 + below(r, 5);
    const batch b(o, long_lengths(r, o, n), tabulation_for(seed));
    std::vector<std::int32_t> members(n);
    for (std::size_t i = 0; i < n; ++i)
      members[i] = static_cast<std::int32_t>(i);
    // a block of the world from rank 0, or (sometimes) a legal block inside it
    std::int32_t first = 0, ranks = o.world_size;
    if (below(r, 4) == 0 && o.world_size >= 8) {
      ranks = o.group_topology == dcpp::topology::aligned
                  ? 4
                  : 3 + static_cast<std::int32_t>(below(r, 3));
      first = o.group_topology == dcpp::topology::aligned ? 4 : 1;
    }
    const double want = exhaustive(b, members, first, ranks);
    const halving all(b.pr, b.e, members, 20, 1 << 20);
    const halving four(b.pr, b.e, members, 12, 4);
    // by ids in any order, or as a set
    std::vector<std::int32_t> backwards(members.rbegin(), members.rend());
    const halving::split& got = all.best(std::span<const std::int32_t>(backwards), first, ranks);
    const halving::split& some = four.best((halving::set{1} << n) - 1, first, ranks);
    ++compared;
    if (!(want < std::numeric_limits<double>::infinity())) {
      CHECK(!(got.time < std::numeric_limits<double>::infinity()));
      CHECK(!(some.time < std::numeric_limits<double>::infinity()));
      continue;
    }
    ++finite;
    CHECK(got.time == doctest::Approx(want).epsilon(1e-12));
    CHECK(some.time >= want * (1 - 1e-12));
    slower += some.time > want * (1 + 1e-9) ? 1 : 0;
    check_split(b, got, members, first, ranks);
    check_split(b, some, members, first, ranks);
    // asked again, the remembered answer
    CHECK(all.best(std::span<const std::int32_t>(members), first, ranks).groups == got.groups);
  }
  CHECK(finite >= compared / 2);
  MESSAGE(finite, " of ", compared, " batches placeable; four splits slower in ", slower);
}

TEST_CASE("bisector: the halves of a block, and members that fit nowhere") {
  dcpp::plan_options o = options_for(48, 4096);
  // 48 aligned ranks: 32 + 16; one sample of 100K tokens needs 32 ranks (25 at 4,096 each)
  const batch b(o, {100000, 60000, 30000}, tabulation::table);
  const std::vector<std::int32_t> ids{0, 1, 2};
  const halving h(b.pr, b.e, ids, 12, 4);
  const halving::split& s = h.best(0b111, 0, 48);
  check_split(b, s, {0, 1, 2}, 0, 48);
  for (const dcpp::plan_group& g : s.groups)
    CHECK((g.cp == 32 || g.cp == 16 || g.cp == 8 || g.cp == 4 || g.cp == 2 || g.cp == 1));
  // 100K tokens on 16 ranks would be 6,250 per rank: no way on a 16-rank block
  CHECK(!(h.best(0b1, 32, 16).time < std::numeric_limits<double>::infinity()));
  // nothing to place takes no time
  CHECK(h.best(0, 0, 48).time == 0);
  CHECK(h.best(0, 0, 48).groups.empty());
}

TEST_CASE("bisected_rounds: every member once, no round empty, the search no slower") {
  int built = 0, faster = 0;
  for (std::uint64_t seed = 1; seed <= (quick() ? 40U : 150U); ++seed) {
    CAPTURE(seed);
    dcpp::workload::rng r(seed);
    const dcpp::plan_options o = small_options(r);
    const std::size_t n = 2 + below(r, 12);
    const batch b(o, long_lengths(r, o, n), tabulation_for(seed));
    std::vector<std::int32_t> members;
    for (std::size_t i = 0; i < n; ++i)
      if (below(r, 5) != 0)
        members.push_back(static_cast<std::int32_t>(i));
    const auto rounds = static_cast<std::int32_t>(1 + below(r, 4));
    const halving h(b.pr, b.e, members, 10, 4);
    const auto dealt = d::bisected_rounds(b.pr, rounds, {.steps = 0, .trials = 0}, h);
    const auto searched = d::bisected_rounds(b.pr, rounds, {}, h);
    // no layouts left to work out, or no splits left to weigh: no step of the search
    const auto capped = d::bisected_rounds(b.pr, rounds, {.layouts = 0}, h);
    const auto spent = d::bisected_rounds(b.pr, rounds, {.work = h.splits_weighed()}, h);
    CHECK(capped.has_value() == dealt.has_value());
    CHECK(spent.has_value() == dealt.has_value());
    if (capped && dealt) {
      CHECK(*capped == *dealt);
      CHECK(*spent == *dealt);
    }
    if (members.size() < static_cast<std::size_t>(rounds)) {
      CHECK(!dealt);
      CHECK(!searched);
      continue;
    }
    if (!searched) {
      CHECK(!dealt); // the search only repairs
      continue;
    }
    ++built;
    CHECK(searched->size() == static_cast<std::size_t>(rounds));
    std::multiset<std::int32_t> seen;
    double total = 0;
    for (const dcpp::plan_microbatch& mb : *searched) {
      CHECK(!mb.groups.empty());
      std::vector<std::int32_t> in_round;
      for (const dcpp::plan_group& g : mb.groups)
        in_round.insert(in_round.end(), g.samples.begin(), g.samples.end());
      seen.insert(in_round.begin(), in_round.end());
      halving::split s;
      s.groups = mb.groups;
      s.time = slowest_group(b, mb);
      check_split(b, s, in_round, 0, o.world_size);
      total += s.time;
    }
    CHECK(seen == std::multiset<std::int32_t>(members.begin(), members.end()));
    if (dealt) {
      double before = 0;
      for (const dcpp::plan_microbatch& mb : *dealt)
        before += slowest_group(b, mb);
      CHECK(total <= before * (1 + 1e-12));
      faster += total < before * (1 - 1e-9) ? 1 : 0;
    }
  }
  CHECK(built >= 20);
  CHECK(faster >= 3);
  MESSAGE(built, " batches built; the search faster in ", faster);
}

TEST_CASE("bisected_rounds: tokens that do not fit the rounds give no rounds") {
  const dcpp::plan_options o = options_for(8, 1024);
  // 3 x 3,000 tokens on 8 ranks of 1,024: 8,192 a round, so one round cannot hold them
  const batch b(o, {3000, 3000, 3000}, tabulation::none);
  const std::vector<std::int32_t> members{0, 1, 2};
  const halving h(b.pr, b.e, members, 10, 4);
  CHECK(!d::bisected_rounds(b.pr, 1, {}, h));
  CHECK(d::bisected_rounds(b.pr, 2, {}, h));
  // more rounds than members
  CHECK(!d::bisected_rounds(b.pr, 4, {}, h));
}
