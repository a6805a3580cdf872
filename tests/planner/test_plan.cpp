// Tests for include/dcpp/planner/{plan,evaluate,plan_hash}.hpp: evaluation, lower bound, hash,
// canonical form.
#include "../support.hpp"

#include "../helpers.hpp"
#include "enumerate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/planner/bounds/budget_lower_bound.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/plan.hpp"
#include "dcpp/planner/plan_hash.hpp"
#include "dcpp/planner/transformer_cost.hpp"
#include "dcpp/planner/validate.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
// transformer_cost without its row hook: the table is filled by cost() alone
struct cost_only {
  dcpp::transformer_cost model;
  double cost(std::int64_t length, std::int32_t cp) const { return model.cost(length, cp); }
};
dcpp::plan_options opts(std::int32_t n, std::int64_t m) {
  return dcpp_test::options(n, m);
}

// A plan dealt by hand through dcpp::plan_builder (each step checked): `round` adds a
// micro-batch of groups (first rank, size, samples), `take` the next `count` sample ids from
// `next` on (the short samples, in order).
struct dealt_plan {
  dcpp::plan_builder builder;
  std::int32_t next;
  struct group {
    std::int32_t first_rank;
    std::int32_t cp;
    std::vector<std::int32_t> samples;
  };
  dealt_plan(const dcpp::problem& pr, std::int32_t first_short)
      : builder(pr, "by hand"), next(first_short) {}
  std::vector<std::int32_t> take(std::int32_t count) {
    std::vector<std::int32_t> ids;
    for (std::int32_t i = 0; i < count; ++i)
      ids.push_back(next++);
    return ids;
  }
  void round(const std::vector<group>& groups) {
    const std::size_t mb = builder.add_microbatch();
    for (const group& g : groups)
      builder.add_group(mb, g.first_rank, g.cp, g.samples);
  }
  //! A round of the next short samples, `per_rank` on each of ranks 0..ranks-1 alone.
  void spread(std::int32_t ranks, std::int32_t per_rank) {
    std::vector<group> groups;
    for (std::int32_t r = 0; r < ranks; ++r)
      groups.push_back({r, 1, take(per_rank)});
    round(groups);
  }
  //! The plan, checked valid under `o`, and its step time under `e`.
  template <class Estimator>
  double step_time(const dcpp::plan_options& o, const dcpp::problem& pr, const Estimator& e) && {
    dcpp::plan p = std::move(builder).finish();
    REQUIRE(dcpp::validate(p, o).ok());
    dcpp::evaluate(p, pr, e);
    return p.metrics.estimated_step_time;
  }
};

// lengths 100, 900, 3000 on 4 ranks, M = 1000: sample 2 needs cp 4
dcpp::plan hand_plan() {
  dcpp::plan p;
  p.world_size = 4;
  p.max_tokens_per_rank = 1000;
  p.lengths = {100, 900, 3000};
  p.microbatches.push_back({{{0, 4, {2}}}, 0, 0});
  p.microbatches.push_back({{{2, 1, {1}}, {0, 2, {0}}}, 0, 0});
  return p;
}
} // namespace

TEST_CASE("plan: evaluate fills times, tokens, idle ranks and metrics by hand") {
  const auto o = opts(4, 1000);
  auto p = hand_plan();
  const auto pr = dcpp::make_problem(o, p.lengths);
  dcpp::evaluate(p, pr, dcpp::length_squared_cost{});
  const auto& mb0 = p.microbatches[0];
  CHECK(mb0.groups[0].tokens == 3000 / 4);
  CHECK(mb0.groups[0].time == 3000.0 * 3000 / 4);
  CHECK(mb0.idle_ranks == 0);
  const auto& mb1 = p.microbatches[1];
  CHECK(mb1.groups[0].tokens == 900);
  CHECK(mb1.groups[1].tokens == 100 / 2);
  CHECK(mb1.time == 900.0 * 900);
  CHECK(mb1.idle_ranks == 1);
  // LB: area (every L^2 on any cp) / 4 vs the longest on its best group (3000^2/4); length^2/cp
  // prices no micro-batch, so each costs 1% of the mean micro-batch at the bound (one here)
  const double area = (100.0 * 100 + 900.0 * 900 + 3000.0 * 3000) / 4;
  const double work = std::max(area, 3000.0 * 3000 / 4);
  const double overhead = 0.01 * work;
  CHECK(p.metrics.microbatch_overhead == doctest::Approx(overhead));
  CHECK(p.metrics.estimated_step_time ==
        doctest::Approx(3000.0 * 3000 / 4 + 900.0 * 900 + 2 * overhead));
  CHECK(p.metrics.lower_bound == doctest::Approx(work + overhead));
  CHECK(p.metrics.efficiency ==
        doctest::Approx(p.metrics.lower_bound / p.metrics.estimated_step_time));
  CHECK(p.metrics.idle_rank_slots == 1);
  CHECK(p.metrics.min_microbatches == 1); // (750*4 + 900 + 100) / 4000 -> 1
}

TEST_CASE("plan: evaluate refuses an overhead its plan cannot carry on a problem never "
          "tabulated") {
  // tabulate_costs (every planner path) refuses such an overhead before packing; evaluate on a
  // problem it never saw priced 2 micro-batches at 1e308 to a step time of inf and an
  // efficiency of 0
  auto o = opts(4, 1000);
  o.microbatch_overhead = 1e308;
  auto p = hand_plan();
  CHECK_THROWS_WITH_AS(
      dcpp::evaluate(p, dcpp::make_problem(o, p.lengths), dcpp::length_squared_cost{}),
      "microbatch_overhead = 1e+308: the plan's 2 micro-batches and their work "
      "cost inf, past the largest double",
      dcpp::error);
  o.microbatch_overhead = 0.8e308; // 1.6e308 and the work: finite
  dcpp::evaluate(p, dcpp::make_problem(o, p.lengths), dcpp::length_squared_cost{});
  CHECK(p.metrics.estimated_step_time == doctest::Approx(1.6e308));
  // the estimator's own: too large, or no price at all (NaN, inf, negative: an efficiency
  // above 1 for -1)
  struct own {
    double overhead;
    double cost(std::int64_t length, std::int32_t cp) const {
      return dcpp::length_squared_cost{}.cost(length, cp);
    }
    double microbatch_overhead() const { return overhead; }
  };
  const auto pr = dcpp::make_problem(opts(4, 1000), p.lengths);
  try {
    dcpp::evaluate(p, pr, own{1e308});
    FAIL("evaluate took an overhead of 1e308 on two micro-batches");
  } catch (const dcpp::error& e) {
    CHECK(e.code() == dcpp::status_code::invalid_cost);
    CHECK(std::string(e.what()) == "estimator: microbatch_overhead() = 1e+308: the plan's 2 "
                                   "micro-batches and their work cost inf, past the largest "
                                   "double");
  }
  for (const double bad :
       {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()})
    CHECK_THROWS_WITH_AS(
        dcpp::evaluate(p, pr, own{bad}),
        fmt::format("estimator: microbatch_overhead() = {} must be finite and >= 0", bad).c_str(),
        dcpp::error);
  dcpp::evaluate(p, pr, own{2.5});
  CHECK(p.metrics.microbatch_overhead == 2.5);
}

TEST_CASE("plan: lower_bound equals a brute-force minimum over every feasible cp") {
  const dcpp::transformer_cost e;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    auto o = opts(static_cast<std::int32_t>(8 + seed % 5 * 8), 4096);
    if (seed % 3 == 0)
      o.group_topology = dcpp::topology::contiguous;
    const auto lengths =
        dcpp::workload::long_tail(50 + seed * 7, seed, 0.1, dcpp::max_plannable_length(o));
    const auto pr = dcpp::make_problem(o, lengths);
    double area = 0;
    double longest = 0;
    for (const auto l : lengths) {
      double best_area = std::numeric_limits<double>::infinity();
      double best_time = std::numeric_limits<double>::infinity();
      for (std::int32_t cp = 1; cp <= o.world_size; ++cp) {
        if (!dcpp::is_legal_group(o, 0, cp))
          continue;
        if (dcpp::padded_length(l, cp) / cp > o.max_tokens_per_rank)
          continue;
        best_area = std::min(best_area, cp * e.cost(l, cp));
        best_time = std::min(best_time, e.cost(l, cp));
      }
      area += best_area;
      longest = std::max(longest, best_time);
    }
    // plus 5 ms (the h100 preset's micro-batch overhead) per micro-batch of the token minimum
    std::int64_t rank_tokens = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i)
      rank_tokens += dcpp::padded_length(lengths[i], pr.min_cp_of[i]);
    const std::int64_t capacity = std::int64_t{o.world_size} * o.max_tokens_per_rank;
    const double k_min = static_cast<double>((rank_tokens + capacity - 1) / capacity);
    CHECK(dcpp::lower_bound(pr, e) ==
          doctest::Approx(std::max(area / o.world_size, longest) + k_min * 5e-3).epsilon(1e-12));
  }
}

TEST_CASE("plan: budget_lower_bound charges the rounds the longest samples force") {
  // 4 aligned ranks, groups of at most 2, M = 100, length^2/cp: a 200-token sample needs a
  // whole group of 2 (100 tokens per rank, 20000 time, area 40000), and no two such share a
  // rank. Two of them fill a round; a third has a round of its own, whose other two ranks take
  // at most 200 tokens of the 10-token samples (100 each, 10 per rank: 2000 of the 40000 free
  // rank time). DESIGN.md's bound: (3 x 40000 + 100 x 100) / 4 = 32500; no sample is heavy
  // (none needs more than half the world), so the idle-ranks term adds nothing; the rounds the
  // 200-token samples force do: (130000 + 40000 - 2000) / 4 = 42000.
  auto o = opts(4, 100);
  o.max_cp = 2;
  o.microbatch_overhead = 0.0;
  std::vector<std::int64_t> lengths(103, 10);
  lengths[0] = lengths[1] = lengths[2] = 200;
  const auto pr = dcpp::make_problem(o, lengths);
  const dcpp::length_squared_cost e;
  CHECK(dcpp::lower_bound(pr, e) == doctest::Approx(32500.0));
  CHECK(dcpp::budget_lower_bound(pr, e) == doctest::Approx(42000.0));
  // a plan at the bound: the two in one round, the third beside 20 short samples, the other 80
  // in two rounds of 10 per rank
  dealt_plan d(pr, 3);
  d.round({{0, 2, {0}}, {2, 2, {1}}});
  d.round({{0, 2, {2}}, {2, 1, d.take(10)}, {3, 1, d.take(10)}});
  for (int round = 0; round < 2; ++round)
    d.spread(4, 10);
  REQUIRE(d.next == 103);
  CHECK(std::move(d).step_time(o, pr, e) == doctest::Approx(42000.0));
  // with groups of 4 allowed, a 200-token sample spreads over the world (10000 on each rank)
  // and nothing is forced: the bound is DESIGN.md's again
  const dcpp::plan_options o2 = o;
  o.max_cp = 0;
  const auto wide = dcpp::make_problem(o, lengths);
  CHECK(dcpp::budget_lower_bound(wide, e) == doctest::Approx(dcpp::lower_bound(wide, e)));

  // Five 150-token samples on 8 ranks (groups of 2, 76 tokens per rank, 11250 time): their
  // tokens (760) fit one round's 800, but no two share a rank, so a round holds at most four.
  // The least charge deals them 3 + 2: 8 x 11250 - 3 x 22500 - 3440 (344 free tokens of
  // 10-token samples) = 19060, and 90000 - 45000 - 4960 = 40040 (4 + 1 charges 61020).
  auto eight = opts(8, 100);
  eight.max_cp = 2;
  eight.microbatch_overhead = 0.0;
  std::vector<std::int64_t> five(105, 10);
  for (std::size_t i = 0; i < 5; ++i)
    five[i] = 150;
  const auto pf = dcpp::make_problem(eight, five);
  CHECK(dcpp::lower_bound(pf, e) == doctest::Approx((5 * 22500.0 + 10000) / 8));
  CHECK(dcpp::budget_lower_bound(pf, e) ==
        doctest::Approx((5 * 22500.0 + 10000 + 19060 + 40040) / 8));

  // Eleven 200-token samples on the first case's 4 ranks: pairs fill five rounds and the
  // eleventh has a round of its own beside 20 short samples (charge 80000 - 40000 - 2000).
  // Dealing eight or ten of them as big, every round they force is full and the rest fill
  // nothing: only the twelve-sample count sees the odd one, (11 x 40000 + 10000 + 38000) / 4.
  std::vector<std::int64_t> eleven(111, 10);
  for (std::size_t i = 0; i < 11; ++i)
    eleven[i] = 200;
  const auto pe = dcpp::make_problem(o2, eleven);
  CHECK(dcpp::lower_bound(pe, e) == doctest::Approx((11 * 40000.0 + 10000) / 4));
  CHECK(dcpp::budget_lower_bound(pe, e) == doctest::Approx(122000.0));
  dealt_plan de(pe, 11);
  for (std::int32_t pair = 0; pair < 5; ++pair)
    de.round({{0, 2, {2 * pair}}, {2, 2, {2 * pair + 1}}});
  de.round({{0, 2, {10}}, {2, 1, de.take(10)}, {3, 1, de.take(10)}});
  for (int round = 0; round < 2; ++round)
    de.spread(4, 10);
  REQUIRE(de.next == 111);
  CHECK(std::move(de).step_time(o2, pe, e) == doctest::Approx(122000.0));
}

TEST_CASE("plan: budget_lower_bound never passes the fastest plan of 2,000 small batches, found "
          "by enumerating every plan") {
  // 2 to 11 samples on 1, 2 or 4 ranks, tight budgets: the forced-round term deals eight of
  // them, the others fill, and then ten and twelve (all of them), the largest of the three
  // taken; under the transformer cost a short sample on a wide group takes several times its
  // least area.
  // the sanitizer build (DCPP_TESTS_QUICK) runs the first 400 (all 2,000 take 30 s there)
  const bool quick = dcpp_test::quick();
  const int trials = quick ? 400 : 2000;
  dcpp::workload::rng r(20261126);
  int tighter = 0;
  int reached = 0;
  for (int trial = 0; trial < trials; ++trial) {
    auto o = opts(std::int32_t{1} << r.uniform_int(0, 2), r.uniform_int(40, 400));
    if (trial % 3 == 0)
      o.microbatch_overhead = 0.0; // the bound's arithmetic alone
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(r.uniform_int(2, 11)));
    const std::int64_t cap = dcpp::max_plannable_length(o);
    for (auto& l : lengths)
      l = r.uniform_int(0, 2) == 0 ? r.uniform_int(1, cap) : r.uniform_int(1, cap / 4 + 1);
    CAPTURE(trial);
    CAPTURE(o.world_size);
    CAPTURE(o.max_tokens_per_rank);
    CAPTURE(lengths);
    const auto pr = dcpp::make_problem(o, lengths);
    const auto check = [&](const auto& e) {
      const double fastest = dcpp_test::fastest_plan(pr, e);
      const double bound = dcpp::budget_lower_bound(pr, e);
      CHECK(bound <= fastest * (1 + 1e-9));
      tighter += bound > dcpp::lower_bound(pr, e) * (1 + 1e-9) ? 1 : 0;
      reached += bound >= fastest * (1 - 1e-9) ? 1 : 0;
    };
    if (trial % 2 == 0)
      check(dcpp::length_squared_cost{});
    else
      check(cost_only{*dcpp::transformer_cost::from_preset("llama3-8b@h100")});
  }
  // the cases bite: the bound is above DESIGN.md's on 587 of them and the fastest plan's own on
  // 1,786 (first 400: 110 and 355; 520 and 1,694, first 400 104 and 337, when the term dealt
  // eight samples only; 365 and 1,451, and 77 and 296, before it dealt each size's pieces into
  // groups and priced what the other samples yield on wide groups; pricing that yield at 0
  // passes 112 plans)
  CHECK(tighter >= (quick ? 105 : 560));
  CHECK(reached >= (quick ? 345 : 1750));
}

TEST_CASE("plan: budget_lower_bound's gap term never passes the fastest plan of 20,000 small "
          "batches of many samples of one smallest size, found by enumerating every plan") {
  // 5 to 10 samples on 2 or 4 aligned ranks or 3 contiguous ones, most of them of smallest size
  // 2 (some of 4), a micro-batch overhead of 3% to 300% of a sample's time: the rounds' gaps
  // cost, and more rounds cost too
  const bool quick = dcpp_test::quick();
  const int trials = quick ? 4000 : 20000;
  dcpp::workload::rng r(20261127);
  int bites = 0;   // the gap term is above DESIGN.md's bound
  int highest = 0; // and above every other term
  for (int trial = 0; trial < trials; ++trial) {
    auto o = opts(std::int32_t{1} << r.uniform_int(1, 2), r.uniform_int(40, 400));
    if (r.uniform_int(0, 3) == 0) {
      o.group_topology = dcpp::topology::contiguous;
      o.world_size = r.uniform_int(0, 1) == 0 ? 3 : o.world_size;
    }
    const std::int64_t m = o.max_tokens_per_rank;
    const std::int64_t cap = dcpp::max_plannable_length(o);
    const bool short_fill = r.uniform_int(0, 2) == 0;
    const std::int64_t kinds = r.uniform_int(0, 3) == 0 ? 7 : 9; // 7: no short samples
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(r.uniform_int(2, 10)));
    for (auto& l : lengths) {
      const std::int64_t kind = r.uniform_int(0, kinds);
      if (kind < 7)
        l = r.uniform_int(m + 1, 2 * m);
      else if (kind < 8 && o.world_size >= 4)
        l = r.uniform_int(2 * m + 1, 4 * m);
      else
        l = r.uniform_int(1, short_fill ? m / 4 + 1 : m);
      l = std::min(l, cap);
    }
    CAPTURE(trial);
    CAPTURE(o.world_size);
    CAPTURE(o.max_tokens_per_rank);
    CAPTURE(lengths);
    const auto check = [&](const auto& e) {
      const auto first = dcpp::make_problem(o, lengths);
      o.microbatch_overhead = dcpp::sample_cost(first, e, 0, first.min_cp_of[0]) *
                              std::pow(10.0, -1.5 + 2.0 * r.uniform());
      CAPTURE(*o.microbatch_overhead);
      const auto pr = dcpp::make_problem(o, lengths);
      const double fastest = dcpp_test::fastest_plan(pr, e);
      const dcpp::detail::budget_terms terms = dcpp::detail::budget_bound_terms(pr, e);
      CHECK(terms.gaps <= fastest * (1 + 1e-9));
      CHECK(dcpp::budget_lower_bound(pr, e) == std::max(terms.gaps, terms.without_gaps));
      bites += terms.gaps > dcpp::lower_bound(pr, e) * (1 + 1e-9) ? 1 : 0;
      highest += terms.gaps > terms.without_gaps * (1 + 1e-9) ? 1 : 0;
    };
    if (trial % 2 == 0)
      check(dcpp::length_squared_cost{});
    else
      check(cost_only{*dcpp::transformer_cost::from_preset("llama3-8b@h100")});
  }
  // the term is above DESIGN.md's bound in 7,665 of them (1,567 of the first 4,000), and above
  // every other term in 40 (10): the forced-round term, which deals all ten samples, is the
  // bound in most (629 and 119 when it dealt eight only). The gap term passes the fastest plan
  // 77 times (19) where the other samples bring nothing into a gap, 102 times (22) where members
  // that fit beside each other are charged their gaps all the same, and 26 times (10) where a
  // member's charge at T is its charge there and not the least from T on.
  CHECK(bites >= (quick ? 1500 : 7500));
  CHECK(highest >= (quick ? 8 : 35));
}

TEST_CASE("plan: budget_lower_bound is the same bit for bit with or without the cost table") {
  // it works per length: from tabulate_costs's rows, or from its own grouping of the lengths
  dcpp::workload::rng r(7);
  const auto e = *dcpp::transformer_cost::from_preset("llama3-8b@h100");
  for (int trial = 0; trial < 20; ++trial) {
    auto o = opts(static_cast<std::int32_t>(r.uniform_int(1, 40)), 4096);
    if (trial % 2 == 1)
      o.group_topology = dcpp::topology::contiguous;
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(r.uniform_int(1, 300)));
    const std::int64_t cap = dcpp::max_plannable_length(o);
    for (auto& l : lengths) // few distinct lengths, in no order
      l = r.uniform_int(0, 3) == 0 ? r.uniform_int(1, cap) : 64 * r.uniform_int(1, 8);
    CAPTURE(trial);
    const auto plain = dcpp::make_problem(o, lengths);
    auto tabulated = dcpp::make_problem(o, lengths);
    dcpp::tabulate_costs(tabulated, e);
    CHECK(dcpp::budget_lower_bound(plain, e) == dcpp::budget_lower_bound(tabulated, e));
  }
}

TEST_CASE("plan: min_microbatches counts each sample on the size that pads it least") {
  // 6 contiguous ranks of 64 tokens: 273 tokens need 5 ranks, padded to 280 there but to 276 on
  // 6, where 57, 36 and 12 tokens take 10, 6 and 2 per rank: one round holds all four (64 per
  // rank). Counted at the smallest sizes, 386 rank-tokens would say 2 rounds, and both bounds
  // passed the one-round plan by a micro-batch overhead.
  auto o = opts(6, 64);
  o.group_topology = dcpp::topology::contiguous;
  o.microbatch_overhead = 50.0;
  const std::vector<std::int64_t> lengths = {12, 57, 36, 273};
  const auto pr = dcpp::make_problem(o, lengths);
  CHECK(pr.min_cp_of[3] == 5);
  CHECK(pr.least_rank_tokens == 12 + 58 + 36 + 276);
  CHECK(dcpp::min_microbatches(pr) == 1);
  const dcpp::length_squared_cost e;
  dealt_plan one(pr, 0);
  one.round({{0, 6, {0, 1, 2, 3}}});
  const double step = std::move(one).step_time(o, pr, e);
  CHECK(step == doctest::Approx((12.0 * 12 + 57.0 * 57 + 36.0 * 36 + 273.0 * 273) / 6 + 50));
  CHECK(dcpp::lower_bound(pr, e) <= step);
  CHECK(dcpp::budget_lower_bound(pr, e) <= step);
}

TEST_CASE("plan: budget_lower_bound counts the idle ranks beside a heavy sample") {
  // 3 ranks, contiguous groups of at most 2, M = 100, length^2/cp: the 200-token sample needs 2
  // ranks (20000 each); 200 samples of 10 tokens (100 each) fill the third rank with at most 10
  // samples (1000 of 20000) in that round, and the rest (19000) spread over 3 ranks elsewhere:
  // 20000 + 19000 / 3. DESIGN.md's bound sees max((40000 + 20000) / 3, 20000) = 20000.
  auto o = opts(3, 100);
  o.group_topology = dcpp::topology::contiguous;
  o.max_cp = 2;
  o.microbatch_overhead = 0.0; // the bound's arithmetic alone
  std::vector<std::int64_t> lengths(201, 10);
  lengths[0] = 200;
  const auto pr = dcpp::make_problem(o, lengths);
  const dcpp::length_squared_cost e;
  CHECK(dcpp::lower_bound(pr, e) == doctest::Approx(20000.0));
  CHECK(dcpp::budget_lower_bound(pr, e) == doctest::Approx(20000.0 + 19000.0 / 3));
  // a plan that reaches it up to the last round's rounding: 20000 + 6 x 1000 + 400
  dealt_plan d(pr, 1);
  d.round({{0, 2, {0}}, {2, 1, d.take(10)}});
  for (int round = 0; round < 6; ++round)
    d.spread(3, 10);
  d.round({{0, 1, d.take(4)}, {1, 1, d.take(3)}, {2, 1, d.take(3)}});
  REQUIRE(d.next == 201);
  const double step = std::move(d).step_time(o, pr, e);
  CHECK(step == doctest::Approx(26400.0));
  CHECK(step >= dcpp::budget_lower_bound(pr, e));
  // without a heavy sample (or when two long samples could share a group) it is lower_bound
  const std::vector<std::int64_t> light(50, 90);
  const auto pl = dcpp::make_problem(o, light);
  CHECK(dcpp::budget_lower_bound(pl, e) == dcpp::lower_bound(pl, e));
  auto one = opts(1, 100);
  const std::vector<std::int64_t> shared{40, 40, 40};
  const auto ps = dcpp::make_problem(one, shared);
  CHECK(dcpp::budget_lower_bound(ps, e) == dcpp::lower_bound(ps, e));
}

TEST_CASE("plan: canonical form and hash") {
  auto a = hand_plan();
  auto b = hand_plan();
  std::swap(b.microbatches[1].groups[0], b.microbatches[1].groups[1]);
  CHECK(dcpp::plan_hash(a) != dcpp::plan_hash(b));
  dcpp::canonicalize(a);
  dcpp::canonicalize(b);
  CHECK(a == b);
  CHECK(dcpp::plan_hash(a) == dcpp::plan_hash(b));
  CHECK(a.microbatches[1].groups[0].first_rank == 0);
  b.microbatches[1].groups[1].samples = {0};
  b.microbatches[1].groups[0].samples = {1};
  CHECK(dcpp::plan_hash(a) != dcpp::plan_hash(b));
  b = a;
  b.lengths[0] = 101;
  CHECK(dcpp::plan_hash(a) != dcpp::plan_hash(b));
  b = a;
  b.metrics.plan_seconds = 123; // timing is not part of the plan's identity
  CHECK(dcpp::plan_hash(a) == dcpp::plan_hash(b));
}

TEST_CASE("plan: rank_groups maps ranks to groups") {
  const auto p = hand_plan();
  CHECK(p.rank_groups(1) == std::vector<std::int32_t>{1, 1, 0, -1});
}

TEST_CASE("plan: the cost table holds the estimator's bits; sample_cost falls back beyond it") {
  const dcpp::transformer_cost e;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    auto o = opts(static_cast<std::int32_t>(8 + seed % 3 * 8), 4096);
    if (seed % 2 == 0)
      o.group_topology = dcpp::topology::contiguous;
    // rows found through a hash of the lengths (long tail: lengths far above the sample count)
    // and through an array over the length values (short lengths, many repeated)
    const std::size_t n = 37 + seed * 11;
    std::vector<std::int64_t> short_lengths(n);
    dcpp::workload::rng r(seed);
    for (auto& l : short_lengths)
      l = r.uniform_int(1, static_cast<std::int64_t>(n));
    for (const auto& lengths :
         {dcpp::workload::long_tail(n, seed, 0.1, dcpp::max_plannable_length(o)), short_lengths}) {
      auto pr = dcpp::make_problem(o, lengths);
      const double untabulated = dcpp::lower_bound(pr, e);
      dcpp::tabulate_costs(pr, e);
      REQUIRE(pr.cost_row.size() == pr.size());
      REQUIRE(pr.costs.size() % pr.cp_sizes.size() == 0);
      REQUIRE(pr.costs.size() <= pr.size() * pr.cp_sizes.size());
      // rows by first occurrence: row r's first sample is row_sample[r]
      REQUIRE(pr.row_sample.size() * pr.cp_sizes.size() == pr.costs.size());
      std::vector<std::int32_t> first_seen;
      for (std::size_t s = 0; s < pr.size(); ++s) {
        const auto row = static_cast<std::size_t>(pr.cost_row[s]);
        CHECK(pr.lengths[s] == pr.lengths[static_cast<std::size_t>(pr.row_sample[row])]);
        if (row == first_seen.size())
          first_seen.push_back(static_cast<std::int32_t>(s));
        CHECK(row < first_seen.size());
      }
      CHECK(first_seen == pr.row_sample);
      // one row per distinct length
      CHECK(pr.row_sample.size() == std::set<std::int64_t>(lengths.begin(), lengths.end()).size());
      for (std::size_t s = 0; s < pr.size(); ++s)
        for (const std::int32_t cp : pr.cp_sizes) {
          INFO("sample " << s << " cp " << cp);
          const double direct = e.cost(pr.lengths[s], cp);
          // identical bits, also below the sample's smallest size (not tabulated: the estimator)
          CHECK(dcpp::sample_cost(pr, e, s, cp) == direct);
        }
      CHECK(dcpp::sample_cost(pr, e, 0, o.world_size + 1) ==
            e.cost(pr.lengths[0], o.world_size + 1));
      CHECK(dcpp::lower_bound(pr, e) == untabulated);
      // the row hook (transformer_cost::costs) fills the table cost() by cost() would, bit for bit
      auto by_cost = dcpp::make_problem(o, lengths);
      dcpp::tabulate_costs(by_cost, cost_only{e});
      REQUIRE(by_cost.costs.size() == pr.costs.size());
      CHECK(std::memcmp(by_cost.costs.data(), pr.costs.data(), pr.costs.size() * sizeof(double)) ==
            0);
      CHECK(by_cost.cost_row == pr.cost_row);
      // over the entry limit: the same rows, no table, the same answers
      const auto rows = pr.cost_row;
      const auto firsts = pr.row_sample;
      dcpp::tabulate_costs(pr, e, 1);
      CHECK(pr.costs.empty());
      CHECK(pr.cost_row == rows);
      CHECK(pr.row_sample == firsts);
      CHECK(pr.cost_row_of(0) == nullptr);
      CHECK(dcpp::lower_bound(pr, e) == untabulated);
      CHECK(dcpp::sample_cost(pr, e, 0, pr.cp_sizes.back()) ==
            e.cost(pr.lengths[0], pr.cp_sizes.back()));
    }
  }
}
