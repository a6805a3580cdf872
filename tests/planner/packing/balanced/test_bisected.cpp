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

namespace {
// The blocks `reserved_blocks` may choose for a world: eighths of it that are whole ranks, and
// the world itself.
std::vector<std::int32_t> block_choices(std::int32_t world) {
  std::vector<std::int32_t> out;
  for (std::int32_t j = 1; j <= 8; ++j)
    if (world * j % 8 == 0)
      out.push_back(world * j / 8);
  return out;
}

// What the blocks lower, worked out here: the rounds' times on their blocks, plus the other
// samples' area beyond what the free ranks hold for their rounds' times, over the world.
double reserve_objective(const halving& h, const std::vector<halving::set>& dealt,
                         const std::vector<std::int32_t>& blocks, double others,
                         std::int32_t world) {
  double sum = 0, free = 0;
  for (std::size_t m = 0; m < dealt.size(); ++m) {
    const double t = h.best(dealt[m], 0, blocks[m]).time;
    sum += t;
    free += static_cast<double>(world - blocks[m]) * t;
  }
  return sum + std::max(0.0, others - free) / world;
}

// The batch ids of a set of the halving's members.
std::vector<std::int32_t> ids_of(const halving& h, halving::set s) {
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < h.members().size(); ++i)
    if ((s >> i) & 1u)
      out.push_back(h.members()[i]);
  return out;
}
} // namespace

TEST_CASE("reserved_blocks: the world without other samples, else no one block's change lowers "
          "the times plus the others' area beyond the free ranks (one round: the least)") {
  int checked = 0, reserved = 0;
  for (std::uint64_t seed = 1; seed <= (quick() ? 40U : 150U); ++seed) {
    CAPTURE(seed);
    dcpp::workload::rng r(seed);
    const dcpp::plan_options o = small_options(r);
    const std::int32_t world = o.world_size;
    const std::size_t n = 1 + below(r, 8);
    const batch b(o, long_lengths(r, o, n), tabulation_for(seed));
    std::vector<std::int32_t> members(n);
    for (std::size_t i = 0; i < n; ++i)
      members[i] = static_cast<std::int32_t>(i);
    const auto rounds = static_cast<std::int32_t>(1 + below(r, std::min<std::uint64_t>(3, n)));
    const halving h(b.pr, b.e, members, 10, 4);
    const auto dealt = d::deal_rounds(b.pr, rounds, {}, h);
    if (!dealt)
      continue;
    ++checked;
    const std::vector<std::int32_t> whole(dealt->size(), world);
    double times = 0;
    for (const halving::set s : *dealt)
      times += h.best(s, 0, world).time;
    // none, or up to twice what the free ranks could hold were every round's ranks free
    const double others =
        below(r, 5) == 0 ? 0.0 : times * world * 2 * static_cast<double>(below(r, 1001)) / 1000.0;
    CAPTURE(others);
    const d::reserved_layout found = d::reserved_blocks<estimator>(*dealt, others, world, h);
    const std::vector<std::int32_t>& blocks = found.blocks;
    REQUIRE(blocks.size() == dealt->size());
    // the times and objective it returns are those of its blocks
    REQUIRE(found.times.size() == blocks.size());
    for (std::size_t m = 0; m < blocks.size(); ++m)
      CHECK(found.times[m] == h.best((*dealt)[m], 0, blocks[m]).time);
    CHECK(found.objective ==
          doctest::Approx(reserve_objective(h, *dealt, blocks, others, world)).epsilon(1e-12));
    if (others == 0) {
      CHECK(blocks == whole);
      continue;
    }
    const std::vector<std::int32_t> choices = block_choices(world);
    for (const std::int32_t blk : blocks) {
      CHECK(std::find(choices.begin(), choices.end(), blk) != choices.end());
      reserved += blk < world ? 1 : 0;
    }
    const double got = reserve_objective(h, *dealt, blocks, others, world);
    CHECK(got < std::numeric_limits<double>::infinity());
    CHECK(got <= reserve_objective(h, *dealt, whole, others, world) * (1 + 1e-12));
    for (std::size_t m = 0; m < blocks.size(); ++m)
      for (const std::int32_t c : choices) {
        std::vector<std::int32_t> other = blocks;
        other[m] = c;
        const double v = reserve_objective(h, *dealt, other, others, world);
        CHECK(v >= got * (1 - 1e-9));
      }
    // each round's layout on its block: legal groups inside it, every member once
    const std::vector<dcpp::plan_microbatch> laid = d::lay_out<estimator>(*dealt, blocks, h);
    REQUIRE(laid.size() == dealt->size());
    for (std::size_t m = 0; m < laid.size(); ++m) {
      halving::split s;
      s.groups = laid[m].groups;
      s.time = slowest_group(b, laid[m]);
      check_split(b, s, ids_of(h, (*dealt)[m]), 0, blocks[m]);
    }
  }
  CHECK(checked >= 30);
  CHECK(reserved >= 5);
  MESSAGE(checked, " deals; ", reserved, " rounds left ranks free");
}

namespace {
// fill_free_ranks' rule written out here: the samples by cost on one rank (most first, then by
// id), each to the free rank of most time left before its round's slowest group (the first in
// round and rank order among equals) where its cost fits that time and its tokens the budget.
struct filled {
  std::vector<std::vector<std::pair<std::int32_t, std::vector<std::int32_t>>>> added; // per round
  std::vector<std::int32_t> left;
};
filled fill_by_hand(const batch& b, const std::vector<dcpp::plan_microbatch>& rounds,
                    const std::vector<std::int32_t>& others) {
  const dcpp::problem& pr = b.pr;
  struct slot {
    std::size_t round;
    std::int32_t rank;
    double room;
    std::int64_t tokens;
    std::vector<std::int32_t> samples;
  };
  std::vector<slot> slots;
  for (std::size_t m = 0; m < rounds.size(); ++m) {
    std::vector<bool> held(static_cast<std::size_t>(pr.options.world_size), false);
    for (const dcpp::plan_group& g : rounds[m].groups)
      for (std::int32_t k = 0; k < g.cp; ++k)
        held[static_cast<std::size_t>(g.first_rank + k)] = true;
    for (std::int32_t rank = 0; rank < pr.options.world_size; ++rank)
      if (!held[static_cast<std::size_t>(rank)])
        slots.push_back({m, rank, slowest_group(b, rounds[m]), 0, {}});
  }
  std::vector<std::int32_t> order = others;
  const auto one_rank = [&](std::int32_t s) {
    return dcpp::sample_cost(pr, b.e, static_cast<std::size_t>(s), 1);
  };
  std::sort(order.begin(), order.end(), [&](std::int32_t x, std::int32_t y) {
    return one_rank(x) > one_rank(y) || (one_rank(x) == one_rank(y) && x < y);
  });
  filled out;
  for (const std::int32_t s : order) {
    const double cost = one_rank(s);
    const std::int64_t tokens = pr.rank_tokens(static_cast<std::size_t>(s), 1);
    slot* to = nullptr;
    for (slot& sl : slots)
      if (cost <= sl.room && sl.tokens + tokens <= pr.options.max_tokens_per_rank &&
          (to == nullptr || sl.room > to->room))
        to = &sl;
    if (to == nullptr) {
      out.left.push_back(s);
      continue;
    }
    to->room -= cost;
    to->tokens += tokens;
    to->samples.push_back(s);
  }
  std::sort(out.left.begin(), out.left.end());
  out.added.resize(rounds.size());
  for (const slot& sl : slots)
    if (!sl.samples.empty())
      out.added[sl.round].emplace_back(sl.rank, sl.samples);
  return out;
}
} // namespace

TEST_CASE("fill_free_ranks: the short samples to free ranks as the rule says, no round slower, "
          "each sample once") {
  int filled_some = 0, left_some = 0, checked = 0;
  for (std::uint64_t seed = 1; seed <= (quick() ? 40U : 150U); ++seed) {
    CAPTURE(seed);
    dcpp::workload::rng r(seed);
    const dcpp::plan_options o = small_options(r);
    const std::int32_t world = o.world_size;
    // a few samples that need CP and many that fit one rank (some of them the budget's
    // worth), some lengths repeated
    const std::size_t n_long = 1 + below(r, 6), n_short = below(r, 40);
    std::vector<std::int64_t> lengths = long_lengths(r, o, n_long);
    for (std::int64_t& l : lengths)
      l = std::max<std::int64_t>(l, 2 * o.max_tokens_per_rank);
    for (std::size_t i = 0; i < n_short; ++i)
      lengths.push_back(below(r, 8) == 0 && i > 0
                            ? lengths.back()
                            : 1 + static_cast<std::int64_t>(
                                      below(r, static_cast<std::uint64_t>(o.max_tokens_per_rank))));
    const batch b(o, lengths, tabulation_for(seed));
    std::vector<std::int32_t> members, others;
    for (std::size_t i = 0; i < lengths.size(); ++i)
      (b.pr.min_cp_of[i] >= 2 ? members : others).push_back(static_cast<std::int32_t>(i));
    if (members.empty())
      continue;
    const auto rounds =
        static_cast<std::int32_t>(1 + below(r, std::min<std::uint64_t>(3, members.size())));
    const halving h(b.pr, b.e, members, 10, 4);
    const auto dealt = d::deal_rounds(b.pr, rounds, {}, h);
    if (!dealt)
      continue;
    // each round on a random block that holds it (the world where none smaller does)
    const std::vector<std::int32_t> choices = block_choices(world);
    std::vector<std::int32_t> blocks;
    std::vector<double> times; // as reserved_blocks returns them: the layout's
    for (const halving::set s : *dealt) {
      std::int32_t blk = choices[below(r, choices.size())];
      if (!(h.best(s, 0, blk).time < std::numeric_limits<double>::infinity()))
        blk = world;
      blocks.push_back(blk);
      times.push_back(h.best(s, 0, blk).time);
    }
    const std::vector<dcpp::plan_microbatch> laid = d::lay_out<estimator>(*dealt, blocks, h);
    std::vector<dcpp::plan_microbatch> rounds_now = laid;
    const std::vector<std::int32_t> left = d::fill_free_ranks(b.pr, b.e, rounds_now, times, others);
    ++checked;
    const filled want = fill_by_hand(b, laid, others);
    CHECK(left == want.left);
    REQUIRE(rounds_now.size() == laid.size());
    std::multiset<std::int32_t> seen(left.begin(), left.end());
    for (std::size_t m = 0; m < laid.size(); ++m) {
      CAPTURE(m);
      // the layout's groups first, as they were; then one group of one rank per filled rank
      REQUIRE(rounds_now[m].groups.size() >= laid[m].groups.size());
      CHECK(std::equal(laid[m].groups.begin(), laid[m].groups.end(), rounds_now[m].groups.begin()));
      std::vector<std::pair<std::int32_t, std::vector<std::int32_t>>> added;
      for (std::size_t g = laid[m].groups.size(); g < rounds_now[m].groups.size(); ++g) {
        const dcpp::plan_group& grp = rounds_now[m].groups[g];
        CHECK(grp.cp == 1);
        added.emplace_back(grp.first_rank, grp.samples);
        seen.insert(grp.samples.begin(), grp.samples.end());
      }
      CHECK(added == want.added[m]);
      // no round slower; legal, disjoint groups within the budget
      CHECK(slowest_group(b, rounds_now[m]) <= slowest_group(b, laid[m]) * (1 + 1e-12));
      std::vector<int> owner(static_cast<std::size_t>(world), 0);
      for (const dcpp::plan_group& g : rounds_now[m].groups) {
        CHECK(dcpp::is_legal_group(o, g.first_rank, g.cp));
        std::int64_t tokens = 0;
        for (const std::int32_t s : g.samples)
          tokens += b.pr.rank_tokens(static_cast<std::size_t>(s), g.cp);
        CHECK(tokens <= o.max_tokens_per_rank);
        for (std::int32_t k = g.first_rank; k < g.first_rank + g.cp; ++k)
          CHECK(++owner[static_cast<std::size_t>(k)] == 1);
      }
    }
    CHECK(std::is_sorted(left.begin(), left.end()));
    CHECK(seen == std::multiset<std::int32_t>(others.begin(), others.end()));
    filled_some += left.size() < others.size() ? 1 : 0;
    left_some += !left.empty() ? 1 : 0;
  }
  CHECK(checked >= 30);
  CHECK(filled_some >= 10);
  CHECK(left_some >= 5);
  MESSAGE(checked, " batches; free ranks took samples in ", filled_some, ", some left in ",
          left_some);
}
