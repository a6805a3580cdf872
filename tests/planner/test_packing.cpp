// Tests for include/dcpp/planner/packing*.hpp: invariants of every policy on thousands of seeded
// workloads, and each policy's defining behaviour on hand-built cases.
#include "../support.hpp"
#include "plan_checks.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "dcpp/planner/packing/balanced.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"
#include "dcpp/planner/packing/static_cp.hpp"
#include "dcpp/planner/packing/uniform_cp.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/workload/generators.hpp"

namespace {
namespace w = dcpp::workload;
using namespace dcpp_test::planning;

} // namespace

namespace {
struct no_name {
  template <class E>
  dcpp::plan pack(const dcpp::problem&, const E&) const {
    return {};
  }
};
} // namespace

TEST_CASE("packing: the concept checks the pack signature and the name") {
  static_assert(dcpp::packing_policy<dcpp::balanced, dcpp::length_squared_cost>);
  static_assert(dcpp::packing_policy<dcpp::megatron_greedy, dcpp::transformer_cost>);
  static_assert(dcpp::packing_policy<dcpp::uniform_cp, dcpp::length_squared_cost>);
  static_assert(dcpp::packing_policy<dcpp::static_cp, dcpp::length_squared_cost>);
  static_assert(!dcpp::packing_policy<no_name, dcpp::length_squared_cost>);
  static_assert(!dcpp::packing_policy<dcpp::balanced, int>);
}

TEST_CASE("packing: invariants of every policy on 2000 seeded random workloads") {
  // the sanitizer build (DCPP_TESTS_QUICK) runs the first 200: it looks for memory and
  // undefined-behaviour errors on every path, which a third of the inputs reach as well, while
  // each trial costs it about 30 times the optimized build's time
  const bool quick = dcpp_test::quick();
  const int trials = quick ? 200 : 2000;
  w::rng r(20261121);
  int planned = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const auto o = random_options(r);
    const auto lengths = random_lengths(r, o);
    CAPTURE(trial);
    CAPTURE(o.world_size);
    CAPTURE(o.max_tokens_per_rank);
    const bool megatron_model = trial % 2 == 0;
    auto all = [&](const auto& e) {
      // the budget-aware bound is a bound: no policy's plan beats it, and it is at least the
      // DESIGN.md bound
      const double tight = dcpp::budget_lower_bound(dcpp::make_problem(o, lengths), e);
      const auto bounded = [&](const dcpp::plan& p) {
        CHECK(p.metrics.estimated_step_time >= tight * (1 - 1e-9));
      };
      const auto b = run<dcpp::balanced>(o, lengths, e);
      check_invariants(b, o);
      bounded(b);
      CHECK(tight >= b.metrics.lower_bound * (1 - 1e-12));
      const auto m = run<dcpp::megatron_greedy>(o, lengths, e);
      check_invariants(m, o);
      bounded(m);
      const auto u = run<dcpp::uniform_cp>(o, lengths, e);
      check_invariants(u, o);
      bounded(u);
      std::optional<dcpp::plan> fixed;
      if (dcpp::planner<std::decay_t<decltype(e)>, dcpp::static_cp>(o, e).can_plan(lengths)) {
        fixed = run<dcpp::static_cp>(o, lengths, e);
        check_invariants(*fixed, o);
        bounded(*fixed);
      }
      // balanced never loses to megatron_greedy; it uses no more micro-batches than it or the
      // token minimum, plus 1/extra_rounds_divisor of it (at least one multiple)
      CHECK(b.metrics.estimated_step_time <= m.metrics.estimated_step_time * (1 + 1e-12));
      const auto k_min = static_cast<std::size_t>(b.metrics.min_microbatches);
      const auto mult = static_cast<std::size_t>(o.microbatch_multiple);
      const auto divisor = static_cast<std::size_t>(dcpp::balanced_tuning{}.extra_rounds_divisor);
      const std::size_t extra =
          (std::max<std::size_t>(1, (k_min + divisor - 1) / divisor) + mult - 1) / mult * mult;
      CHECK(b.microbatches.size() <= std::max(m.microbatches.size(), k_min + extra));
      // nor than static_cp, when its plan fits the same allowance
      if (fixed && fixed->microbatches.size() <= std::max(m.microbatches.size(), k_min + extra))
        CHECK(b.metrics.estimated_step_time <= fixed->metrics.estimated_step_time * (1 + 1e-12));
      CHECK(b.microbatches.size() >= k_min);
      // determinism: the same bytes on a second run
      const auto again = run<dcpp::balanced>(o, lengths, e);
      CHECK(dcpp::plan_hash(again) == dcpp::plan_hash(b));
      CHECK(again.microbatches == b.microbatches);
    };
    if (megatron_model)
      all(dcpp::length_squared_cost{});
    else
      all(dcpp::transformer_cost{});
    ++planned;
  }
  CHECK(planned == trials);
}

TEST_CASE("megatron_greedy: the longest sample opens the first group and sets the cap") {
  // 8 ranks, M = 1000, L^2 cost: sample 0 (3000) needs cp 4; the cap is 3000*1000*1.05
  dcpp::plan_options o = options_for(8, 1000);
  const std::vector<std::int64_t> lengths{3000, 900, 900, 900, 900, 100, 100};
  const auto p = run<dcpp::megatron_greedy>(o, lengths, dcpp::length_squared_cost{});
  REQUIRE(!p.microbatches.empty());
  const auto& first = p.microbatches[0];
  const auto with0 = std::find_if(first.groups.begin(), first.groups.end(), [](const auto& g) {
    return std::find(g.samples.begin(), g.samples.end(), 0) != g.samples.end();
  });
  REQUIRE(with0 != first.groups.end());
  CHECK(with0->first_rank == 0);
  CHECK(with0->cp == 4); // no other cp-4 sample, and groups only grow into idle ranks
  // every rank busy in every micro-batch: idle ranks are filled by growing groups
  for (const auto& mb : p.microbatches)
    CHECK(mb.idle_ranks == 0);
}

TEST_CASE(
    "megatron_greedy: 24 ranks never form a group beyond the world, long samples still plan") {
  dcpp::plan_options o = options_for(24, 4096);
  const std::vector<std::int64_t> lengths{65520, 40000, 3000, 2000, 1000, 500, 30000, 4096};
  for (const auto& p : {run<dcpp::megatron_greedy>(o, lengths, dcpp::length_squared_cost{}),
                        run<dcpp::balanced>(o, lengths, dcpp::transformer_cost{}),
                        run<dcpp::uniform_cp>(o, lengths, dcpp::length_squared_cost{})}) {
    check_invariants(p, o);
    for (const auto& mb : p.microbatches)
      for (const auto& g : mb.groups)
        if (g.cp == 16)
          CHECK(g.first_rank == 0);
  }
}

TEST_CASE("uniform_cp: one CP size per micro-batch, from its longest sample") {
  dcpp::plan_options o = options_for(16, 2048);
  const auto lengths = w::long_tail(300, 4, 0.05, dcpp::max_plannable_length(o));
  const auto p = run<dcpp::uniform_cp>(o, lengths, dcpp::length_squared_cost{});
  const auto pr = dcpp::make_problem(o, lengths);
  for (const auto& mb : p.microbatches) {
    std::set<std::int32_t> sizes;
    std::int32_t longest_cp = 0;
    for (const auto& g : mb.groups) {
      sizes.insert(g.cp);
      for (const auto s : g.samples)
        longest_cp = std::max(longest_cp, pr.min_cp_of[static_cast<std::size_t>(s)]);
    }
    CHECK(sizes.size() == 1);
    CHECK(*sizes.begin() == longest_cp);
  }
}

TEST_CASE("remaining_samples: the next sample no longer than a limit, as a scan finds it") {
  w::rng r(20261202);
  for (const std::size_t n : {std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{33},
                              std::size_t{97}, std::size_t{1000}, std::size_t{4099}}) {
    const auto o = options_for(8, 4096);
    std::vector<std::int64_t> lengths(n);
    for (auto& l : lengths)
      l = r.uniform_int(0, 4 * 4096);
    const auto pr = dcpp::make_problem(o, lengths);
    std::vector<std::int32_t> order(n);
    for (std::size_t k = 0; k < n; ++k)
      order[k] = static_cast<std::int32_t>((k * 7 + 3) % n); // not the identity
    dcpp::detail::remaining_samples rest(pr, order);
    std::vector<bool> taken(n, false);
    std::size_t left = n;
    const auto scan = [&](std::size_t from, std::int64_t limit) {
      for (std::size_t k = from; k < n; ++k)
        if (!taken[k] && lengths[static_cast<std::size_t>(order[k])] <= limit)
          return k;
      return dcpp::detail::remaining_samples::npos;
    };
    while (left > 0) {
      for (int q = 0; q < 20; ++q) {
        const auto from = static_cast<std::size_t>(r.uniform_int(0, static_cast<std::int64_t>(n)));
        const std::int64_t limit =
            q == 0 ? std::numeric_limits<std::int64_t>::max() : r.uniform_int(-1, 4 * 4096);
        REQUIRE(rest.next(from, limit) == scan(from, limit));
      }
      // take the first remaining, or a random one
      std::size_t k =
          r.uniform_int(0, 1) == 0
              ? scan(0, std::numeric_limits<std::int64_t>::max())
              : static_cast<std::size_t>(r.uniform_int(0, static_cast<std::int64_t>(n) - 1));
      while (taken[k])
        k = (k + 1) % n;
      CHECK(rest.sample(k) == order[k]);
      CHECK_FALSE(rest.taken(k));
      rest.remove(k);
      CHECK(rest.taken(k));
      taken[k] = true;
      --left;
      CHECK(rest.empty() == (left == 0));
    }
    CHECK(rest.next(0, std::numeric_limits<std::int64_t>::max()) ==
          dcpp::detail::remaining_samples::npos);
  }
}

TEST_CASE("longest_fitting: a length fits a room exactly when it is at most the longest") {
  w::rng r(20261203);
  for (int t = 0; t < 20000; ++t) {
    dcpp::plan_options o;
    o.padding_unit = static_cast<std::int32_t>(r.uniform_int(1, 5));
    const auto cp = static_cast<std::int32_t>(r.uniform_int(0, 12));
    const std::int64_t room = r.uniform_int(-3, 400);
    const std::int64_t length = r.uniform_int(0, 5000);
    const bool fits = cp >= 1 && dcpp::tokens_per_rank(o, length, cp) <= room;
    CAPTURE(o.padding_unit);
    CAPTURE(cp);
    CAPTURE(room);
    CAPTURE(length);
    CHECK(fits == (length <= dcpp::detail::longest_fitting(o, room, cp)));
  }
}

TEST_CASE("static_cp: every group has the fixed size; the check names a sample that cannot fit") {
  dcpp::plan_options o = options_for(16, 1024);
  const auto lengths = w::sft_lognormal(200, 8, 800, 1.2, 64, 4096);
  const auto p = run<dcpp::static_cp>(o, lengths, dcpp::length_squared_cost{}, dcpp::static_cp{4});
  for (const auto& mb : p.microbatches)
    for (const auto& g : mb.groups)
      CHECK(g.cp == 4);
  const auto auto_cp = run<dcpp::static_cp>(o, lengths, dcpp::length_squared_cost{});
  CHECK(auto_cp.microbatches.front().groups.front().cp == 4); // 4096 tokens need 4 ranks
  const dcpp::planner<dcpp::length_squared_cost, dcpp::static_cp> too_small(o, {},
                                                                            dcpp::static_cp{2});
  const auto s = too_small.can_plan(lengths);
  CHECK(s.code == dcpp::status_code::sample_too_long);
  CHECK(s.message.find("static cp = 2") != std::string::npos);
  CHECK_THROWS_AS(too_small.make_plan(lengths), dcpp::error);
  o.world_size = 24;
  const dcpp::planner<dcpp::length_squared_cost, dcpp::static_cp> uneven(o, {},
                                                                         dcpp::static_cp{16});
  CHECK(uneven.can_plan(lengths).code == dcpp::status_code::world_not_divisible);
  // a negative size is refused (it was taken for 0, the smallest that fits)
  o.world_size = 16;
  const dcpp::planner<dcpp::length_squared_cost, dcpp::static_cp> negative(o, {},
                                                                           dcpp::static_cp{-1});
  const auto n = negative.can_plan(lengths);
  CHECK(n.code == dcpp::status_code::invalid_option);
  CHECK(n.message.find("static cp = -1 must be >= 0") != std::string::npos);
}

TEST_CASE("balanced: spreads a short-only batch evenly and meets the micro-batch multiple") {
  dcpp::plan_options o = options_for(8, 4096);
  o.microbatch_multiple = 3;
  const auto lengths = w::short_only(333, 12, 1000);
  const auto p = run<dcpp::balanced>(o, lengths, dcpp::transformer_cost{});
  check_invariants(p, o);
  CHECK(p.microbatches.size() % 3 == 0);
  CHECK(p.metrics.efficiency > 0.95);
}

TEST_CASE("balanced: options assigned in any order give the same bytes") {
  const auto lengths = w::bimodal(257, 31);
  dcpp::plan_options a;
  a.world_size = 32;
  a.max_tokens_per_rank = 4096;
  a.microbatch_multiple = 2;
  dcpp::plan_options b;
  b.microbatch_multiple = 2;
  b.max_tokens_per_rank = 4096;
  b.world_size = 32;
  CHECK(dcpp::plan_hash(run<dcpp::balanced>(a, lengths, dcpp::transformer_cost{})) ==
        dcpp::plan_hash(run<dcpp::balanced>(b, lengths, dcpp::transformer_cost{})));
}

TEST_CASE("balanced: extra_microbatches = 0 holds it to the token minimum or Megatron's count") {
  // the sanitizer build (DCPP_TESTS_QUICK) runs seed 1
  const std::uint64_t seeds = dcpp_test::quick() ? 1 : 6;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    dcpp::plan_options o = options_for(48, 8192);
    const auto lengths = w::long_tail(900, seed);
    dcpp::balanced strict;
    strict.extra_microbatches = 0;
    const auto b = run<dcpp::balanced>(o, lengths, dcpp::transformer_cost{}, strict);
    const auto m = run<dcpp::megatron_greedy>(o, lengths, dcpp::transformer_cost{});
    CHECK(b.microbatches.size() <=
          std::max(m.microbatches.size(), static_cast<std::size_t>(b.metrics.min_microbatches)));
    CHECK(b.metrics.estimated_step_time <= m.metrics.estimated_step_time * (1 + 1e-12));
    // the default may add rounds; it still never loses to megatron_greedy
    const auto relaxed = run<dcpp::balanced>(o, lengths, dcpp::transformer_cost{});
    CHECK(relaxed.metrics.estimated_step_time <= m.metrics.estimated_step_time * (1 + 1e-12));
  }
}

TEST_CASE("balanced: each construction alone runs, and the megatron plan is the fallback") {
  // `constructions` selects whose plans compete; the megatron construction still bounds the
  // rounds. Before this was fixed, targeted alone ran levelled (targeted needed the megatron bit,
  // and levelled was forced on without it): the two single-construction plans were identical.
  using B = dcpp::balanced;
  int targeted_differs = 0, static_differs = 0;
  // the sanitizer build (DCPP_TESTS_QUICK) runs seed 1 alone and leaves out the two counts,
  // which need the four seeds
  const bool quick = dcpp_test::quick();
  for (std::uint64_t seed = 1; seed <= (quick ? 1u : 4u); ++seed) {
    CAPTURE(seed);
    const dcpp::plan_options o = options_for(48, 8192);
    const auto lengths = w::long_tail(600, seed);
    const auto only = [&](std::uint32_t bits,
                          std::int64_t variants_limit = B{}.tuning.levelled_variants_limit) {
      B b;
      b.constructions = bits;
      b.tuning.levelled_variants_limit = variants_limit;
      auto p = run<B>(o, lengths, dcpp::transformer_cost{}, b);
      check_invariants(p, o);
      return p;
    };
    const auto m = run<dcpp::megatron_greedy>(o, lengths, dcpp::transformer_cost{});
    const auto megatron = only(B::construct_megatron), levelled = only(B::construct_levelled),
               targeted = only(B::construct_targeted), fixed = only(B::construct_static),
               chunked = only(B::construct_chunked), bisected = only(B::construct_bisected),
               none = only(0), all = only(B{}.constructions),
               levelled_single = only(B::construct_levelled, 0);
    // (the old targeted-alone plan was exactly the single levelled one, without its variants)
    targeted_differs += targeted.microbatches != levelled_single.microbatches ? 1 : 0;
    static_differs += fixed.microbatches != levelled.microbatches ? 1 : 0;
    // the megatron plan improved by the local search never loses to megatron_greedy's own
    CHECK(megatron.metrics.estimated_step_time <= m.metrics.estimated_step_time * (1 + 1e-12));
    // no construction selected: the fallback is the megatron plan, improved
    CHECK(none.microbatches == megatron.microbatches);
    // every selected plan stays within the rounds the megatron plan bounds (plus the extra ones)
    // (the token minimum and as many again, or Megatron's count)
    for (const auto* p : {&levelled, &targeted, &fixed, &chunked, &bisected})
      CHECK(p->microbatches.size() <=
            std::max(m.microbatches.size(),
                     2 * static_cast<std::size_t>(p->metrics.min_microbatches)));
    // all six together keep the best of them
    for (const auto* p : {&megatron, &levelled, &targeted, &fixed, &chunked, &bisected})
      CHECK(all.metrics.estimated_step_time <= p->metrics.estimated_step_time * (1 + 1e-12));
  }
  if (quick)
    return;
  CHECK(targeted_differs >= 1);
  CHECK(static_differs >= 1);
}

namespace {
// The benchmark's long-tail batch on 48 ranks (seed `seed`) planned by `without` (a part of
// balanced turned off) and by the default; the default's plan is valid and never slower.
std::pair<dcpp::plan, dcpp::plan> long_tail_48_without(const dcpp::balanced& without,
                                                       std::uint64_t seed) {
  const dcpp::plan_options o = options_for(48, 8192);
  const auto lengths = w::long_tail(1536, seed);
  // on one network tier, where these numbers were measured, and without the chunked and the
  // bisected constructions in either (they lift some of these batches by themselves)
  constexpr std::uint32_t later =
      dcpp::balanced::construct_chunked | dcpp::balanced::construct_bisected;
  dcpp::balanced with;
  with.constructions &= ~later;
  dcpp::balanced less = without;
  less.constructions &= ~later;
  auto a = run<dcpp::balanced>(o, lengths, one_tier_h100(), less);
  auto b = run<dcpp::balanced>(o, lengths, one_tier_h100(), with);
  check_invariants(b, o);
  CHECK(b.metrics.estimated_step_time <= a.metrics.estimated_step_time);
  return {std::move(a), std::move(b)};
}
} // namespace

TEST_CASE("balanced: the levelled variants (0% and 10% area reach) keep the best plan") {
  // below levelled_variants_limit the construction also runs with a narrower and a wider reach;
  // the plan kept is never slower than with the 5% reach alone, and on long-tail batches on 48
  // ranks it is often much faster (the benchmark's long_tail/48/s1: 0.954 -> 0.985)
  dcpp::balanced single;
  single.tuning.levelled_variants_limit = 0;
  std::size_t better = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    CAPTURE(seed);
    const auto [a, b] = long_tail_48_without(single, seed);
    better += b.metrics.estimated_step_time < a.metrics.estimated_step_time * (1 - 1e-3) ? 1 : 0;
  }
  CHECK(better >= 1);
}

TEST_CASE("balanced: the heavy-sample variant keeps the best plan and lifts long_tail/48/s2") {
  // heavy_share = 0 turns the fourth levelled variant off; with it, the plan is never slower,
  // and the benchmark's long_tail/48/s2 (two 128K samples that the other variants stack in one
  // 32-rank group) goes from under 0.97 to over it
  dcpp::balanced without;
  without.tuning.heavy_share = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    CAPTURE(seed);
    const auto [a, b] = long_tail_48_without(without, seed);
    if (seed == 2) {
      CHECK(a.metrics.efficiency < 0.97);
      CHECK(b.metrics.efficiency >= 0.97);
    }
  }
}

namespace {
// A batch under length^2/cp planned without the chunked and bisected constructions (`before`)
// and with the one of them in `bit` alone (`after`), and its budget-aware bound; `after` is
// checked valid. Both without the tied constructions: every size ties in area under
// length^2/cp, and those lift these batches by themselves.
struct one_construction {
  dcpp::balanced with;
  double bound = 0;
  dcpp::plan before, after;
};
one_construction plan_with_only(const dcpp::plan_options& o,
                                const std::vector<std::int64_t>& lengths, std::uint32_t bit) {
  constexpr std::uint32_t both =
      dcpp::balanced::construct_chunked | dcpp::balanced::construct_bisected;
  one_construction r;
  r.with.constructions &= ~dcpp::balanced::construct_tied;
  r.bound = dcpp::budget_lower_bound(dcpp::make_problem(o, lengths), dcpp::length_squared_cost{});
  dcpp::balanced without = r.with;
  without.constructions &= ~both;
  r.with.constructions &= ~(both & ~bit);
  r.before = run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{}, without);
  r.after = run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{}, r.with);
  check_invariants(r.after, o);
  return r;
}
} // namespace

TEST_CASE("balanced: the chunked construction packs a class of samples apart from the rest") {
  // 400 long-tail samples on 24 ranks under length^2/cp: the portfolio without it (and without
  // the bisected construction, which also lifts this batch, to 0.995) had 0.985 of the
  // budget-aware bound; the 4K-8K-token samples on 2 ranks, packed side by side in their own
  // rounds and the rest of the batch after, reach 0.996
  const dcpp::plan_options o = options_for(24, 8192);
  const auto lengths = w::long_tail(400, 1);
  const auto r = plan_with_only(o, lengths, dcpp::balanced::construct_chunked);
  CHECK(r.bound / r.before.metrics.estimated_step_time < 0.99);
  CHECK(r.bound / r.after.metrics.estimated_step_time > 0.995);
  // not where the best plan is already within chunked_gap of the lower bound
  dcpp::balanced close = r.with;
  close.tuning.chunked_gap = 1.0;
  CHECK(run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{}, close).microbatches ==
        r.before.microbatches);
}

TEST_CASE("balanced: the bisected construction halves each round's ranks between long samples") {
  // 800 long-tail samples on 48 ranks under length^2/cp: the portfolio without it (and without
  // the chunked construction) had 0.970 of the budget-aware bound. Its 15 samples that need CP
  // dealt to rounds of their own, each round's 32 + 16 ranks halved between them, and the rest
  // of the batch after, reach 0.998
  const dcpp::plan_options o = options_for(48, 8192);
  const auto lengths = w::long_tail(800, 1);
  const auto r = plan_with_only(o, lengths, dcpp::balanced::construct_bisected);
  CHECK(r.bound / r.before.metrics.estimated_step_time < 0.972);
  CHECK(r.bound / r.after.metrics.estimated_step_time > 0.995);
  // and with every construction
  const auto all = run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{});
  CHECK(all.metrics.estimated_step_time <= r.after.metrics.estimated_step_time * (1 + 1e-12));
  // not where too many samples need CP for a round's splits (bisected_round_samples), nor past
  // bisected_samples of them, nor where the best plan is within chunked_gap of the bound
  for (const auto& off : {+[](dcpp::balanced_tuning& t) { t.bisected_round_samples = 1; },
                          +[](dcpp::balanced_tuning& t) { t.bisected_samples = 8; },
                          +[](dcpp::balanced_tuning& t) { t.chunked_gap = 1.0; }}) {
    dcpp::balanced b = r.with;
    off(b.tuning);
    CHECK(run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{}, b).microbatches ==
          r.before.microbatches);
  }
}

TEST_CASE("balanced: the bisected construction leaves ranks free for the short samples") {
  // The benchmark's context_ext/64 under the two-tier preset: 10 samples of 68K-260K tokens
  // among 512 on 64 ranks of 16K tokens. Laid out on the whole world in each round, the long
  // samples' rounds leave no rank for the short ones, which take rounds of their own: 0.956 of
  // the budget-aware bound with every other construction. With a round's members on 16 of the
  // 64 ranks and the short samples first on the other 48, 0.984.
  const dcpp::plan_options o = options_for(64, 16384);
  const auto lengths = w::context_extension(512, 11, std::int64_t{64} * 16384 / 4);
  const auto e = *dcpp::transformer_cost::from_preset("llama3-8b@h100");
  const double bound = dcpp::budget_lower_bound(dcpp::make_problem(o, lengths), e);
  dcpp::balanced without; // (nor with the tied constructions, which reach 0.99 there)
  without.tuning.bisected_reserve = false;
  without.constructions &= ~dcpp::balanced::construct_tied;
  const auto before = run<dcpp::balanced>(o, lengths, e, without);
  const auto after = run<dcpp::balanced>(o, lengths, e);
  check_invariants(after, o);
  CHECK(bound / before.metrics.estimated_step_time < 0.96);
  CHECK(bound / after.metrics.estimated_step_time > 0.98);
  // the bisected construction alone with its reserve is the plan
  dcpp::balanced alone;
  alone.constructions = dcpp::balanced::construct_bisected;
  CHECK(bound / run<dcpp::balanced>(o, lengths, e, alone).metrics.estimated_step_time > 0.975);
}

TEST_CASE("balanced: the cost table changes no plan") {
  // with a table, work shared by the samples of one length is done once per length (CP choice,
  // the levelled order: one sample per length sorted, its row's samples listed after it);
  // without one, per sample. Batches with many repeated lengths (rollouts piled at the cap,
  // short-only) and few (log-normal), aligned and contiguous, below and past the limits.
  const dcpp::transformer_cost e;
  struct batch {
    std::int32_t world;
    std::vector<std::int64_t> lengths;
    dcpp::topology topology;
  };
  const std::vector<batch> batches = {
      {24, w::rl_rollouts(333, 3), dcpp::topology::aligned},
      {64, w::sft_lognormal(2500, 5), dcpp::topology::aligned},
      {48, w::short_only(1001, 7), dcpp::topology::contiguous},
      {32, w::long_tail(777, 9), dcpp::topology::contiguous},
      {64, w::rl_rollouts(4099, 11), dcpp::topology::aligned},
  };
  for (const auto& b : batches) {
    CAPTURE(b.world);
    CAPTURE(b.lengths.size());
    dcpp::plan_options o = options_for(b.world, 8192);
    o.group_topology = b.topology;
    auto tabulated = dcpp::make_problem(o, b.lengths);
    dcpp::tabulate_costs(tabulated, e);
    REQUIRE_FALSE(tabulated.costs.empty());
    REQUIRE(tabulated.costs.size() / tabulated.cp_sizes.size() < b.lengths.size()); // shared rows
    const auto direct = dcpp::make_problem(o, b.lengths);
    const auto a = dcpp::balanced{}.pack(tabulated, e);
    const auto c = dcpp::balanced{}.pack(direct, e);
    CHECK(a.microbatches == c.microbatches);
  }
}

TEST_CASE("balanced: an unusable tuning is refused, naming the member, its value and the limit") {
  const dcpp::plan_options o = options_for(16, 4096);
  const auto lengths = w::bimodal(100, 3);
  CHECK(dcpp::balanced_tuning{}.check().ok());
  const auto refused = [&](auto&& change, const std::string& message) {
    dcpp::balanced b;
    change(b.tuning);
    const dcpp::planner<dcpp::transformer_cost, dcpp::balanced> p(o, {}, b);
    const dcpp::status s = p.can_plan(lengths);
    CHECK(s.code == dcpp::status_code::invalid_option);
    CHECK(s.message == message);
    CHECK_THROWS_WITH_AS((void)p.make_plan(lengths), message.c_str(), dcpp::error);
    // and the policy alone, without the planner's check
    const dcpp::problem pr = dcpp::make_problem(o, lengths);
    CHECK_THROWS_WITH_AS((void)b.pack(pr, dcpp::transformer_cost{}), message.c_str(), dcpp::error);
  };
  refused([](auto& t) { t.extra_rounds_divisor = 0; },
          "balanced tuning: extra_rounds_divisor = 0 is below 1");
  refused([](auto& t) { t.full_round_check_every = -3; },
          "balanced tuning: full_round_check_every = -3 is below 1");
  refused([](auto& t) { t.wide_candidates = 0; },
          "balanced tuning: wide_candidates = 0 is below 1");
  refused([](auto& t) { t.reach_area = std::numeric_limits<double>::quiet_NaN(); },
          "balanced tuning: reach_area = nan is not a finite number in [0, 1e+300]");
  refused([](auto& t) { t.improve_within = 0.5; },
          "balanced tuning: improve_within = 0.5 is not a finite number in [1, 1e+300]");
  refused([](auto& t) { t.area_noise = std::numeric_limits<double>::infinity(); },
          "balanced tuning: area_noise = inf is not a finite number in [0.5, 1]");
  refused([](auto& t) { t.bound_reached_large = -0.5; },
          "balanced tuning: bound_reached_large = -0.5 is not a finite number in [0, 1]");
  refused([](auto& t) { t.aligned_gap = std::numeric_limits<double>::quiet_NaN(); },
          "balanced tuning: aligned_gap = nan is not a finite number in [0, 1e+300]");
  refused([](auto& t) { t.second_list_gap = -0.01; },
          "balanced tuning: second_list_gap = -0.01 is not a finite number in [0, 1e+300]");
  refused([](auto& t) { t.tie_area = 0.99; },
          "balanced tuning: tie_area = 0.99 is not a finite number in [1, 1e+300]");
  refused([](auto& t) { t.loose_tie_area = std::numeric_limits<double>::quiet_NaN(); },
          "balanced tuning: loose_tie_area = nan is not a finite number in [1, 1e+300]");
  refused([](auto& t) { t.close_tie_area = 0.999; },
          "balanced tuning: close_tie_area = 0.999 is not a finite number in [1, 1e+300]");
  refused([](auto& t) { t.loose_tied_within = 0.5; },
          "balanced tuning: loose_tied_within = 0.5 is not a finite number in [1, 1e+300]");
  refused([](auto& t) { t.swap_groups = -5; }, "balanced tuning: swap_groups = -5 is below 1");
  refused([](auto& t) { t.final_candidates_factor = 0; },
          "balanced tuning: final_candidates_factor = 0 is below 1");
  refused([](auto& t) { t.final_search_from = -1; },
          "balanced tuning: final_search_from = -1 is below 0");
  refused([](auto& t) { t.tile_exchange_sweeps = -1; },
          "balanced tuning: tile_exchange_sweeps = -1 is below 0");
  refused([](auto& t) { t.bisected_splits = 0; },
          "balanced tuning: bisected_splits = 0 is below 1");
  refused([](auto& t) { t.bisected_trials = -1; },
          "balanced tuning: bisected_trials = -1 is below 0");
  refused([](auto& t) { t.bisected_fill = 0; },
          "balanced tuning: bisected_fill = 0 is not a finite number in [0.01, 1]");
  refused([](auto& t) { t.bisected_round_samples = std::numeric_limits<double>::quiet_NaN(); },
          "balanced tuning: bisected_round_samples = nan is not a finite number in [0, 1e+300]");
  refused([](auto& t) { t.bisected_work = -std::numeric_limits<double>::infinity(); },
          "balanced tuning: bisected_work = -inf is not a finite number in [0, 1e+300]");
}

TEST_CASE("balanced: no plan keeps an empty round it could drop") {
  // 1,536 bimodal samples on 96 ranks under the two-tier H100 model: the local search emptied
  // 10 of the chunked plan's 38 rounds, each paying the micro-batch overhead for nothing
  const auto estimator = *dcpp::transformer_cost::from_preset("llama3-8b@h100");
  const auto empty_rounds = [](const dcpp::plan& p) {
    return std::count_if(p.microbatches.begin(), p.microbatches.end(),
                         [](const dcpp::plan_microbatch& mb) { return mb.groups.empty(); });
  };
  for (const std::int32_t multiple : {1, 4}) {
    CAPTURE(multiple);
    dcpp::plan_options o = options_for(96, 4096);
    o.microbatch_multiple = multiple;
    const auto lengths = w::bimodal(1536, 1);
    const auto b = run<dcpp::balanced>(o, lengths, estimator);
    check_invariants(b, o);
    CHECK(empty_rounds(b) < multiple);
  }
  // and on the random batches, where the multiple allows dropping them
  w::rng r(20261126);
  const bool quick = dcpp_test::quick();
  for (int trial = 0; trial < (quick ? 100 : 400); ++trial) {
    const auto o = random_options(r);
    const auto lengths = random_lengths(r, o);
    CAPTURE(trial);
    const auto b = trial % 2 == 0 ? run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{})
                                  : run<dcpp::balanced>(o, lengths, estimator);
    CHECK(empty_rounds(b) < o.microbatch_multiple);
  }
}

TEST_CASE("balanced: an extra round sheds a dominant sample's small companions") {
  // three samples on 32 ranks, budget 4096: the 64K one needs 16 ranks, which span nodes, and
  // is fastest on all 32; no construction but the bisected one leaves it alone, so the two
  // short samples share its round (and its slow ring). The pass after the portfolio moves them
  // to a round of their own, which costs 5 ms and saves more
  const dcpp::plan_options o = options_for(32, 4096);
  const std::vector<std::int64_t> lengths{1830, 65536, 412};
  dcpp::balanced without;
  without.constructions &= ~dcpp::balanced::construct_bisected;
  dcpp::balanced with = without;
  without.tuning.spill_passes = 0;
  const auto one = run<dcpp::balanced>(o, lengths, dcpp::transformer_cost{}, without);
  const auto two = run<dcpp::balanced>(o, lengths, dcpp::transformer_cost{}, with);
  // with every construction (the bisected one also puts the long sample in a round of its
  // own), no slower
  const auto all = run<dcpp::balanced>(o, lengths, dcpp::transformer_cost{});
  CHECK(all.microbatches.size() == 2);
  CHECK(all.metrics.estimated_step_time <= two.metrics.estimated_step_time * (1 + 1e-12));
  check_invariants(two, o);
  CHECK(one.microbatches.size() == 1);
  REQUIRE(two.microbatches.size() == 2);
  CHECK(two.metrics.estimated_step_time < one.metrics.estimated_step_time - 0.05);
  // the long sample alone on all 32 ranks in one of the rounds
  bool alone = false;
  for (const auto& mb : two.microbatches)
    alone = alone || (mb.groups.size() == 1 && mb.groups[0].cp == 32 &&
                      mb.groups[0].samples == std::vector<std::int32_t>{1});
  CHECK(alone);
  // --extra-microbatches 0 holds it to the token minimum
  dcpp::balanced capped;
  capped.extra_microbatches = 0;
  CHECK(run<dcpp::balanced>(o, lengths, dcpp::transformer_cost{}, capped).microbatches.size() == 1);
}

namespace {
// static_cp's placement rule written plainly (the policy scans up to 64 slots and keeps a window
// of the 64 least-loaded past that): among the 64 least-loaded slots (load, then id) the first
// with token room, else the roomiest slot (tokens, then id) if it has room, else one more
// micro-batch multiple
template <class Estimator = dcpp::length_squared_cost>
std::vector<std::vector<std::int32_t>> static_reference(const dcpp::problem& pr, std::int32_t c,
                                                        const Estimator& estimator = {}) {
  const auto groups = static_cast<std::size_t>(pr.options.world_size / c);
  // the policy's order: the bucketing's, made stable by descending cost
  std::vector<std::int32_t> order =
      dcpp::detail::flatten(dcpp::make_buckets(dcpp::by_cp_size{}, pr, estimator));
  std::vector<double> cost(pr.size());
  std::int64_t total = 0;
  for (std::size_t i = 0; i < pr.size(); ++i) {
    cost[i] = estimator.cost(pr.lengths[i], c);
    total += pr.rank_tokens(i, c);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return cost[static_cast<std::size_t>(a)] > cost[static_cast<std::size_t>(b)];
  });
  const std::int64_t budget = pr.options.max_tokens_per_rank;
  std::size_t k = static_cast<std::size_t>(std::max<std::int64_t>(
      1, (total + std::int64_t(groups) * budget - 1) / (std::int64_t(groups) * budget)));
  std::vector<double> load(k * groups, 0.0);
  std::vector<std::int64_t> tokens(k * groups, 0);
  std::vector<std::vector<std::int32_t>> slots(k * groups);
  for (const std::int32_t s : order) {
    const std::int64_t t = pr.rank_tokens(static_cast<std::size_t>(s), c);
    std::size_t chosen = slots.size();
    while (chosen == slots.size()) {
      std::vector<std::size_t> ids(slots.size());
      for (std::size_t i = 0; i < ids.size(); ++i)
        ids[i] = i;
      std::stable_sort(ids.begin(), ids.end(),
                       [&](std::size_t a, std::size_t b) { return load[a] < load[b]; });
      for (std::size_t j = 0; j < std::min<std::size_t>(64, ids.size()); ++j)
        if (tokens[ids[j]] + t <= budget) {
          chosen = ids[j];
          break;
        }
      if (chosen == slots.size()) {
        const auto roomiest = static_cast<std::size_t>(
            std::min_element(tokens.begin(), tokens.end()) - tokens.begin());
        if (tokens[roomiest] + t <= budget)
          chosen = roomiest;
      }
      if (chosen == slots.size()) {
        load.resize(load.size() + groups, 0.0);
        tokens.resize(tokens.size() + groups, 0);
        slots.resize(slots.size() + groups);
      }
    }
    slots[chosen].push_back(s);
    load[chosen] += cost[static_cast<std::size_t>(s)];
    tokens[chosen] += t;
  }
  return slots;
}
} // namespace

namespace {
// static_cp's plan against the plain rule; the plan's slot count
template <class Estimator = dcpp::length_squared_cost>
std::size_t check_static_against_reference(const dcpp::problem& pr,
                                           const Estimator& estimator = {}) {
  const dcpp::static_cp policy{};
  const std::int32_t c = policy.resolve(pr);
  const dcpp::plan p = policy.pack(pr, estimator);
  const auto expected = static_reference(pr, c, estimator);
  const auto groups = static_cast<std::size_t>(pr.options.world_size / c);
  REQUIRE(p.microbatches.size() * groups == expected.size());
  for (std::size_t m = 0; m < p.microbatches.size(); ++m) {
    std::size_t g = 0;
    for (std::size_t slot = m * groups; slot < (m + 1) * groups; ++slot) {
      if (expected[slot].empty())
        continue;
      REQUIRE(g < p.microbatches[m].groups.size());
      CHECK(p.microbatches[m].groups[g].first_rank ==
            static_cast<std::int32_t>((slot - m * groups) * static_cast<std::size_t>(c)));
      CHECK(p.microbatches[m].groups[g].samples == expected[slot]);
      ++g;
    }
    CHECK(g == p.microbatches[m].groups.size());
  }
  return expected.size();
}

// free below 600 tokens, length^2/cp from there (within the estimator contract: many slots then
// keep the same load as samples join them)
struct free_below_600 {
  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const noexcept {
    return length < 600 ? 0.0 : dcpp::length_squared_cost{}.cost(length, cp);
  }
};
// a negative cost, outside the estimator contract: loads fall as samples join
struct negative_cost {
  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const noexcept {
    return -static_cast<double>(length % 997) / cp;
  }
};
} // namespace

TEST_CASE("static_cp: the slot choice is the plain rule, below and past 64 slots") {
  // few slots (a scan) and many (the window of the 64 least-loaded), and batches that grow rounds
  // past the token minimum, crossing from one to the other
  dcpp::workload::rng r(0x57a7);
  for (int trial = 0; trial < 60; ++trial) {
    CAPTURE(trial);
    const std::int32_t world = std::int32_t{1} << r.uniform_int(0, 6);
    const std::int64_t budget = 512 * r.uniform_int(1, 8);
    const auto lengths = w::sft_lognormal(static_cast<std::size_t>(r.uniform_int(1, 700)), r.next(),
                                          300, 1.1, 1, budget);
    check_static_against_reference(dcpp::make_problem(options_for(world, budget), lengths));
  }
}

TEST_CASE("static_cp: past 64 slots, long tails, costless and negative-cost samples follow the "
          "plain rule") {
  // a long tail fills the lightest slots' tokens with short samples, so the 64 least-loaded have
  // no room for most samples and the roomiest takes them; costless samples leave loads as they
  // are and negative ones lower them (the window is then rebuilt)
  dcpp::workload::rng r(0x7a11);
  std::size_t windowed = 0;
  for (int trial = 0; trial < 60; ++trial) {
    CAPTURE(trial);
    const std::int32_t world = std::int32_t{1} << r.uniform_int(4, 6);
    const std::int64_t budget = 1024 * r.uniform_int(2, 8);
    const auto lengths = w::long_tail(static_cast<std::size_t>(r.uniform_int(300, 1500)), r.next(),
                                      0.02 + 0.1 * r.uniform(), budget * 8);
    const dcpp::problem pr = dcpp::make_problem(options_for(world, budget), lengths);
    std::size_t slots = 0;
    switch (trial % 3) {
    case 0: slots = check_static_against_reference(pr); break;
    case 1: slots = check_static_against_reference(pr, free_below_600{}); break;
    default: slots = check_static_against_reference(pr, negative_cost{}); break;
    }
    windowed += slots > 64 ? 1 : 0;
  }
  CHECK(windowed >= 36);
}

TEST_CASE("balanced: under length^2/cp one world-wide size per round balances to the bound") {
  // every size costs a sample the same area under length^2/cp, so one group of the whole world
  // per round balances any mix; the rounds the portfolio built from least-area sizes did not
  // (0.95 of the bound on 4,096 SFT samples over 64 ranks: the longest samples share rounds)
  const dcpp::plan_options o = options_for(32, 4096);
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    CAPTURE(seed);
    const auto lengths = w::sft_lognormal(1500, seed, 900, 1.0, 16, 4096);
    dcpp::balanced without;
    // (nor from the sizes the sized and tied constructions raise, which reach 0.99 there)
    without.constructions = dcpp::balanced{}.constructions &
                            ~(dcpp::balanced::construct_static | dcpp::balanced::construct_sized |
                              dcpp::balanced::construct_tied);
    const auto before = run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{}, without);
    const auto p = run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{});
    check_invariants(p, o);
    CHECK(p.metrics.efficiency > 0.999);
    CHECK(p.metrics.efficiency > before.metrics.efficiency + 0.01);
    // one size throughout, and a wide one (the widest whose padding fits the token minimum)
    const std::int32_t size = p.microbatches.front().groups.front().cp;
    CHECK(size >= 16);
    for (const auto& mb : p.microbatches)
      for (const auto& g : mb.groups)
        CHECK(g.cp == size);
  }
}

TEST_CASE("balanced: the sizes of least total area: the widest that fits the rounds, and the "
          "widest") {
  // 16 ranks, padding unit 64: at cp 16 every sample pads to a multiple of 2,048 tokens
  dcpp::plan_options o = options_for(16, 2048);
  o.padding_unit = 64;
  const std::vector<std::int64_t> lengths(48, 700); // 700 tokens: 768 at cp 2, 2,048 at cp 16
  const dcpp::problem pr = dcpp::make_problem(o, lengths);
  const dcpp::detail::cost_rows<dcpp::length_squared_cost> rows(pr, dcpp::length_squared_cost{});
  const dcpp::balanced_tuning t{};
  // rank-tokens of the 48 samples per group: 36,864 at cp 1, 18,432 at cp 2, 12,288 at cp 4,
  // 6,144 at cp 8 and cp 16 (128 per rank); a round holds 16 x 2,048 / cp per group. In two
  // rounds cp 8 is the widest that fits (2 x 2 x 2,048 = 8,192 per group), cp 16 does not
  CHECK(dcpp::detail::least_total_area_sizes(rows, 1, 2, t) == std::vector<std::int32_t>{8, 16});
  CHECK(dcpp::detail::least_total_area_sizes(rows, 1, 3, t) == std::vector<std::int32_t>{16});
  // in one round none fits: the smallest, and the widest
  CHECK(dcpp::detail::least_total_area_sizes(rows, 1, 1, t) == std::vector<std::int32_t>{1, 16});
  // where a size costs less area (one tier, per-step latency), only that size
  const dcpp::transformer_cost estimator = one_tier_h100(); // cost_rows keeps a reference
  const dcpp::detail::cost_rows<dcpp::transformer_cost> h100(pr, estimator);
  CHECK(dcpp::detail::least_total_area_sizes(h100, 1, 2, t) == std::vector<std::int32_t>{1});
}

TEST_CASE("balanced: a plan at the lower bound ends the portfolio without changing the result") {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    CAPTURE(seed);
    const dcpp::plan_options o = options_for(32, 4096);
    const auto lengths = w::rl_rollouts(300, seed);
    dcpp::balanced every_step;
    every_step.tuning.bound_reached = 0;
    every_step.tuning.bound_reached_large = 0;
    const auto all = run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{}, every_step);
    const auto early = run<dcpp::balanced>(o, lengths, dcpp::length_squared_cost{});
    CHECK(early.metrics.estimated_step_time <= all.metrics.estimated_step_time * (1 + 1e-9));
    CHECK(early.metrics.efficiency > 0.999);
  }
}

namespace {
//! The growth rule step by step as written first (and as Megatron-LM does it): the first group
//! of the smallest size that can grow grows one size, then every group is re-sorted by size
//! (stably) and laid out again. The reference for the queue-based `grow_into_idle_ranks`.
std::vector<dcpp::detail::microbatch_state::group>
grow_reference(std::vector<dcpp::detail::microbatch_state::group> groups, std::int32_t world,
               const dcpp::problem& pr, const dcpp::transformer_cost& e) {
  const auto sort_by_size = [&] {
    std::stable_sort(groups.begin(), groups.end(),
                     [](const auto& a, const auto& b) { return a.cp > b.cp; });
    std::int32_t next = 0;
    for (auto& g : groups) {
      g.first_rank = next;
      next += g.cp;
    }
    return world - next;
  };
  std::int32_t free = sort_by_size();
  while (free > 0) {
    std::optional<std::size_t> pick;
    std::int32_t next_cp = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto it = std::upper_bound(pr.cp_sizes.begin(), pr.cp_sizes.end(), groups[g].cp);
      if (it == pr.cp_sizes.end() || *it - groups[g].cp > free)
        continue;
      if (!pick || groups[g].cp < groups[*pick].cp)
        pick = g, next_cp = *it;
    }
    if (!pick)
      break;
    auto& grp = groups[*pick];
    grp.cp = next_cp;
    grp.tokens = 0;
    grp.load = 0;
    for (const std::int32_t s : grp.samples) {
      grp.tokens += pr.rank_tokens(static_cast<std::size_t>(s), next_cp);
      grp.load += dcpp::sample_cost(pr, e, static_cast<std::size_t>(s), next_cp);
    }
    free = sort_by_size();
  }
  return groups;
}
} // namespace

TEST_CASE("microbatch_state: growing into idle ranks matches the re-sorting reference") {
  const dcpp::transformer_cost e;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    w::rng r(seed);
    dcpp::plan_options o = options_for(static_cast<std::int32_t>(r.uniform_int(1, 200)), 4096);
    o.group_topology = seed % 2 == 0 ? dcpp::topology::contiguous : dcpp::topology::aligned;
    if (o.group_topology == dcpp::topology::aligned)
      o.world_size = 1 << r.uniform_int(0, 7);
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(r.uniform_int(1, 60)));
    for (auto& l : lengths)
      l = r.uniform_int(1, 3000);
    const dcpp::problem pr = dcpp::make_problem(o, lengths);
    // groups of random sizes on some of the ranks, samples dealt at random
    dcpp::detail::microbatch_state mb(o.world_size);
    for (std::int32_t s = 0; s < static_cast<std::int32_t>(lengths.size()); ++s) {
      const auto& groups = mb.groups();
      if (!groups.empty() && r.uniform_int(0, 2) == 0) {
        const auto g = static_cast<std::int32_t>(
            r.uniform_int(0, static_cast<std::int64_t>(groups.size()) - 1));
        const std::int32_t cp = groups[static_cast<std::size_t>(g)].cp;
        mb.add(g, s, pr.rank_tokens(static_cast<std::size_t>(s), cp),
               dcpp::sample_cost(pr, e, static_cast<std::size_t>(s), cp));
        continue;
      }
      const std::int32_t cp = pr.cp_sizes[static_cast<std::size_t>(r.uniform_int(
          0, std::min<std::int64_t>(2, static_cast<std::int64_t>(pr.cp_sizes.size()) - 1)))];
      if (const auto first = mb.free_block(o, cp)) {
        const std::int32_t g = mb.open(*first, cp);
        mb.add(g, s, pr.rank_tokens(static_cast<std::size_t>(s), cp),
               dcpp::sample_cost(pr, e, static_cast<std::size_t>(s), cp));
      }
    }
    const auto expected = grow_reference(mb.groups(), o.world_size, pr, e);
    mb.grow_into_idle_ranks(pr, e);
    REQUIRE(mb.groups().size() == expected.size());
    for (std::size_t g = 0; g < expected.size(); ++g) {
      CHECK(mb.groups()[g].first_rank == expected[g].first_rank);
      CHECK(mb.groups()[g].cp == expected[g].cp);
      CHECK(mb.groups()[g].samples == expected[g].samples);
      CHECK(mb.groups()[g].load == expected[g].load);
      CHECK(mb.groups()[g].tokens == expected[g].tokens);
    }
  }
}

namespace {
//! A seeded round of `world` ranks: samples in groups of legal sizes at or above their least
//! size, token room kept, some ranks left idle. Returns the round and its samples.
std::pair<dcpp::detail::microbatch_state, std::vector<std::int32_t>>
random_round(const dcpp::problem& pr, const dcpp::transformer_cost& e, w::rng& r) {
  const dcpp::plan_options& o = pr.options;
  dcpp::detail::microbatch_state round(o.world_size);
  std::vector<std::int32_t> placed;
  for (std::size_t i = 0; i < pr.size(); ++i) {
    const auto sm = static_cast<std::int32_t>(i);
    auto& groups = round.groups();
    // join an open group with room half of the time, else open one of a random legal size
    if (!groups.empty() && r.uniform_int(0, 1) == 0) {
      const auto g =
          static_cast<std::size_t>(r.uniform_int(0, static_cast<std::int64_t>(groups.size()) - 1));
      if (groups[g].cp >= pr.min_cp_of[i] &&
          groups[g].tokens + pr.rank_tokens(i, groups[g].cp) <= o.max_tokens_per_rank) {
        round.add(static_cast<std::int32_t>(g), sm, pr.rank_tokens(i, groups[g].cp),
                  dcpp::sample_cost(pr, e, i, groups[g].cp));
        placed.push_back(sm);
        continue;
      }
    }
    std::vector<std::int32_t> sizes;
    for (const std::int32_t cp : pr.cp_sizes)
      if (cp >= pr.min_cp_of[i] && round.free_block(o, cp))
        sizes.push_back(cp);
    if (sizes.empty())
      continue; // no room: the sample is not in this round
    const std::int32_t cp = sizes[static_cast<std::size_t>(
        r.uniform_int(0, std::min<std::int64_t>(2, static_cast<std::int64_t>(sizes.size()) - 1)))];
    const std::int32_t g = round.open(*round.free_block(o, cp), cp);
    round.add(g, sm, pr.rank_tokens(i, cp), dcpp::sample_cost(pr, e, i, cp));
    placed.push_back(sm);
  }
  return {std::move(round), placed};
}
} // namespace

TEST_CASE("microbatch_state: the critical group grows into idle ranks or sheds a sample, never "
          "slower, until neither helps (500 seeded rounds, both topologies)") {
  const dcpp::transformer_cost e;
  std::int32_t grew = 0, stopped_with_free = 0;
  for (std::uint64_t seed = 1; seed <= 500; ++seed) {
    CAPTURE(seed);
    w::rng r(seed);
    const auto world = static_cast<std::int32_t>(r.uniform_int(2, 48));
    dcpp::plan_options o = options_for(world, 4096 * r.uniform_int(1, 4));
    o.group_topology = seed % 2 == 0 ? dcpp::topology::aligned : dcpp::topology::contiguous;
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(r.uniform_int(1, 12)));
    for (auto& l : lengths)
      l = r.uniform_int(1, 2 * o.max_tokens_per_rank);
    const dcpp::problem pr = dcpp::make_problem(o, lengths);
    auto [round, placed] = random_round(pr, e, r);
    if (placed.empty())
      continue;
    const double before = round.max_load();
    round.grow_critical_into_idle_ranks(pr, e);
    const auto& groups = round.groups();
    // every placed sample once; legal, disjoint groups inside the world; loads and tokens exact
    std::vector<std::int32_t> after;
    std::vector<int> owner(static_cast<std::size_t>(world), 0);
    double most = 0;
    for (const auto& g : groups) {
      REQUIRE(dcpp::is_legal_group(o, g.first_rank, g.cp));
      REQUIRE(std::find(pr.cp_sizes.begin(), pr.cp_sizes.end(), g.cp) != pr.cp_sizes.end());
      for (std::int32_t k = g.first_rank; k < g.first_rank + g.cp; ++k)
        REQUIRE(++owner[static_cast<std::size_t>(k)] == 1);
      double load = 0;
      std::int64_t tokens = 0;
      for (const std::int32_t sm : g.samples) {
        const auto us = static_cast<std::size_t>(sm);
        REQUIRE(g.cp >= pr.min_cp_of[us]);
        load += dcpp::sample_cost(pr, e, us, g.cp);
        tokens += pr.rank_tokens(us, g.cp);
        after.push_back(sm);
      }
      CHECK(g.load == doctest::Approx(load).epsilon(1e-12));
      CHECK(g.tokens == tokens);
      CHECK(tokens <= o.max_tokens_per_rank);
      most = std::max(most, g.load);
    }
    std::sort(after.begin(), after.end());
    std::sort(placed.begin(), placed.end());
    CHECK(after == placed);
    CHECK(most <= before);
    grew += most < before ? 1 : 0;
    // the stop: free ranks left only when no group at the most load can get faster by either step
    const std::int32_t free = round.free_ranks();
    if (free == 0)
      continue;
    ++stopped_with_free;
    bool some_critical_stuck = false;
    for (const auto& g : groups) {
      if (g.load != most)
        continue;
      bool helps = false;
      for (const std::int32_t cp : pr.cp_sizes) {
        if (cp <= g.cp || cp - g.cp > free)
          continue;
        double load = 0;
        for (const std::int32_t sm : g.samples)
          load += dcpp::sample_cost(pr, e, static_cast<std::size_t>(sm), cp);
        helps = helps || load < g.load;
      }
      if (g.samples.size() > 1) {
        std::size_t costliest = 0;
        for (std::size_t k = 1; k < g.samples.size(); ++k)
          if (dcpp::sample_cost(pr, e, static_cast<std::size_t>(g.samples[k]), g.cp) >
              dcpp::sample_cost(pr, e, static_cast<std::size_t>(g.samples[costliest]), g.cp))
            costliest = k;
        const auto us = static_cast<std::size_t>(g.samples[costliest]);
        const auto size =
            std::lower_bound(pr.cp_sizes.begin(), pr.cp_sizes.end(), pr.min_cp_of[us]);
        if (size != pr.cp_sizes.end() && *size <= free) {
          double rest = 0;
          for (std::size_t k = 0; k < g.samples.size(); ++k)
            if (k != costliest)
              rest += dcpp::sample_cost(pr, e, static_cast<std::size_t>(g.samples[k]), g.cp);
          helps = helps || std::max(rest, dcpp::sample_cost(pr, e, us, *size)) < g.load;
        }
      }
      some_critical_stuck = some_critical_stuck || !helps;
    }
    CHECK(some_critical_stuck);
  }
  CHECK(grew > 50);
  CHECK(stopped_with_free > 20);
}

namespace {
//! 512 samples of 1-8K tokens (the benchmark's contiguous scaling corner, smaller).
std::vector<std::int64_t> corner_lengths() {
  w::rng r(12);
  std::vector<std::int64_t> lengths(512);
  for (auto& l : lengths)
    l = r.uniform_int(1, 8192);
  return lengths;
}
} // namespace

TEST_CASE("balanced: more ranks than samples, past the megatron limit, the groups take the idle "
          "ranks") {
  // 512 samples of 1-8K tokens on 2,048 contiguous ranks: the constructions leave most ranks
  // idle (0.15 of the bound before this pass); megatron_greedy, which grows its groups into
  // idle ranks, reached 0.55
  const std::vector<std::int64_t> lengths = corner_lengths();
  dcpp::plan_options o = options_for(2048, 16384);
  o.group_topology = dcpp::topology::contiguous;
  const dcpp::transformer_cost e;
  const auto b = run<dcpp::balanced>(o, lengths, e);
  const auto m = run<dcpp::megatron_greedy>(o, lengths, e);
  check_invariants(b, o);
  CHECK(b.metrics.efficiency > 0.9);
  CHECK(b.metrics.estimated_step_time < m.metrics.estimated_step_time);
}

TEST_CASE("balanced: with few samples per rank, past the megatron limit, never slower than "
          "megatron_greedy") {
  // 512 samples of 1-8K tokens on 256-1,024 contiguous ranks (2 to 0.5 samples per rank): the
  // constructions leave one sample per rank where megatron_greedy packs the short ones and grows
  // the long ones' groups; the megatron plan competes there (`megatron_samples_per_rank`)
  const std::vector<std::int64_t> lengths = corner_lengths();
  const dcpp::transformer_cost e;
  for (const std::int32_t world : {256, 512, 1024}) {
    CAPTURE(world);
    dcpp::plan_options o = options_for(world, 16384);
    o.group_topology = dcpp::topology::contiguous;
    const auto b = run<dcpp::balanced>(o, lengths, e);
    const auto m = run<dcpp::megatron_greedy>(o, lengths, e);
    check_invariants(b, o);
    CHECK(b.metrics.estimated_step_time <= m.metrics.estimated_step_time);
    if (world == 1024) { // without the rule it was 20% slower there (10% since issue 61)
      dcpp::balanced without;
      without.tuning.megatron_samples_per_rank = 0;
      CHECK(run<dcpp::balanced>(o, lengths, e, without).metrics.estimated_step_time >
            1.05 * m.metrics.estimated_step_time);
    }
  }
}

TEST_CASE("balanced: contiguous groups are never slower than the aligned plan of the batch") {
  // The contiguous ladders (a sample's smallest size, doubled) pack worse than the powers of
  // two on long-tailed batches; the portfolio also runs on the aligned sizes and keeps the
  // faster plan (`aligned_in_contiguous`) where its own is not within `aligned_gap` of the bound
  const dcpp::transformer_cost e;
  int slower_without = 0;
  // the sanitizer build (DCPP_TESTS_QUICK) leaves out the 64-rank batches (half the test's time)
  const bool quick = dcpp_test::quick();
  for (const std::int32_t world : {24, 40, 64}) {
    if (quick && world == 64)
      continue;
    for (const std::uint64_t seed : {3u, 8u}) {
      CAPTURE(world);
      CAPTURE(seed);
      const auto lengths = w::long_tail(static_cast<std::size_t>(20 * world - 3), seed);
      dcpp::plan_options o = options_for(world, 8192);
      const auto aligned = run<dcpp::balanced>(o, lengths, e);
      o.group_topology = dcpp::topology::contiguous;
      const auto contiguous = run<dcpp::balanced>(o, lengths, e);
      check_invariants(contiguous, o);
      const dcpp::balanced_tuning t;
      CHECK(contiguous.metrics.estimated_step_time <=
            std::max(aligned.metrics.estimated_step_time,
                     contiguous.metrics.lower_bound * (1 + t.aligned_gap)));
      dcpp::balanced without;
      without.tuning.aligned_in_contiguous = false;
      const auto alone = run<dcpp::balanced>(o, lengths, e, without);
      CHECK(contiguous.metrics.estimated_step_time <= alone.metrics.estimated_step_time);
      slower_without +=
          alone.metrics.estimated_step_time > 1.01 * aligned.metrics.estimated_step_time ? 1 : 0;
    }
  }
  // what the step is for: measured 1.5-5% slower on 4 of the 6 (2 or more of the 4 without world
  // 64)
  CHECK(slower_without >= 2);
}

TEST_CASE("balanced: contiguous sizes the aligned ones cannot hold plan without the aligned run") {
  // min_cp 3 is no power of two; a sample of 3 x 4096 tokens needs 4 aligned ranks of a world
  // of 3: both leave the aligned run out, and the contiguous plan is the portfolio's own
  const dcpp::transformer_cost e;
  dcpp::plan_options o = options_for(3, 4096);
  o.group_topology = dcpp::topology::contiguous;
  const std::vector<std::int64_t> lengths{3 * 4096, 100, 2000, 4096, 7};
  CHECK_FALSE(dcpp::detail::aligned_problem(dcpp::make_problem(o, lengths), e).has_value());
  check_invariants(run<dcpp::balanced>(o, lengths, e), o);
  o = options_for(6, 4096);
  o.group_topology = dcpp::topology::contiguous;
  o.min_cp = 3;
  CHECK_FALSE(dcpp::detail::aligned_problem(dcpp::make_problem(o, lengths), e).has_value());
  check_invariants(run<dcpp::balanced>(o, lengths, e), o);
  // where they can: the same lengths, aligned sizes up to the largest power of two, the
  // contiguous problem's overhead
  o = options_for(6, 4096);
  o.group_topology = dcpp::topology::contiguous;
  const dcpp::problem pr = dcpp::make_problem(o, lengths);
  const auto aligned = dcpp::detail::aligned_problem(pr, e);
  REQUIRE(aligned.has_value());
  CHECK(aligned->cp_sizes == std::vector<std::int32_t>{1, 2, 4});
  CHECK(aligned->lengths == lengths);
  CHECK(aligned->options.group_topology == dcpp::topology::aligned);
  CHECK(dcpp::microbatch_overhead(*aligned, e) == dcpp::microbatch_overhead(pr, e));
}
