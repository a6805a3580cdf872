// Tests for balanced/assignment.hpp: plans in and out, opening, filling and closing groups
// against a plain model of the ranks, the rounds walked by free ranks.
#include "../../../support.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "dcpp/planner/packing/balanced/assignment.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"
#include "dcpp/planner/plan.hpp"
#include "parts.hpp"

namespace {
using namespace dcpp_test::balanced_parts;
namespace d = dcpp::detail;
namespace w = dcpp::workload;

//! The step time of a plan added up directly: per round the slowest group's summed costs.
double step_of(const dcpp::plan& p, const batch& b) {
  double step = static_cast<double>(p.microbatches.size()) * dcpp::microbatch_overhead(b.pr, b.e);
  for (const auto& mb : p.microbatches) {
    double slowest = 0;
    for (const auto& g : mb.groups) {
      double load = 0;
      for (const std::int32_t s : g.samples)
        load += static_cast<double>(b.e.cost(b.pr.lengths[static_cast<std::size_t>(s)], g.cp));
      slowest = std::max(slowest, load);
    }
    step += slowest;
  }
  return step;
}
} // namespace

TEST_CASE("assignment: a plan in and out is the same plan, its step time added up directly") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    const random_case c = make_random_case(seed);
    const batch b(c.options, c.lengths, tabulation_for(seed));
    dcpp::plan p = dcpp::megatron_greedy{}.pack(b.pr, b.e);
    const state a = state::from_plan(b.costs, p);
    check_state(a, b);
    CHECK(a.rounds() == static_cast<std::int32_t>(p.microbatches.size()));
    CHECK(a.step_time() == doctest::Approx(step_of(p, b)).epsilon(1e-12));
    dcpp::plan back = a.to_plan(p.policy);
    dcpp::canonicalize(p);
    dcpp::canonicalize(back);
    CHECK(back.microbatches == p.microbatches);
  }
}

TEST_CASE("assignment: open, insert, remove and close against a model of the ranks") {
  // one round of 8 aligned ranks: groups opened where free_block says, samples moved at random;
  // a group closes with its last sample and its ranks are free again; ids are never reused
  const dcpp::plan_options o = options_for(8, 4096);
  w::rng r(7);
  std::vector<std::int64_t> lengths(40);
  for (auto& l : lengths)
    l = r.uniform_int(1, 1500);
  const batch b(o, lengths, tabulation::none);
  state a(b.costs, 2, d::least_area_sizes(b.costs, dcpp::balanced_tuning{}));
  std::map<std::int32_t, std::vector<std::int32_t>> model; // open group id -> samples
  std::vector<std::int32_t> where(lengths.size(), -1);
  std::int32_t next_id = 0;
  for (int step = 0; step < 400; ++step) {
    const auto s = static_cast<std::int32_t>(r.uniform_int(0, 39));
    const auto us = static_cast<std::size_t>(s);
    if (where[us] >= 0) { // take it out
      const std::int32_t id = where[us];
      if (r.uniform_int(0, 1) == 0) {
        a.remove(id, s);
      } else { // with the largest load of the round's other groups, as the local search knows it
        double others = 0;
        a.for_each_group(a.round_of(id), [&](std::int32_t other) {
          if (other != id)
            others = std::max(others, a.group_at(other).load);
        });
        a.remove(id, s, others);
      }
      auto& list = model[id];
      list.erase(std::find(list.begin(), list.end(), s));
      where[us] = -1;
      if (list.empty()) {
        model.erase(id);
        CHECK_FALSE(a.open_group(id));
      }
    } else { // into an open group with room, or a new one
      std::int32_t id = -1;
      for (const auto& [g, list] : model)
        if (a.group_at(g).tokens + b.costs.tokens(s, a.group_at(g).cp) <= o.max_tokens_per_rank)
          id = g;
      if (id < 0 || r.uniform_int(0, 2) == 0) {
        const std::int32_t m = static_cast<std::int32_t>(r.uniform_int(0, 1));
        const std::int32_t cp = b.pr.min_cp_of[us];
        const auto first = a.free_block(m, cp);
        if (!first)
          continue;
        id = a.open(m, *first, cp);
        CHECK(id == next_id++);
        model[id] = {};
      }
      a.insert(id, s);
      model[id].push_back(s);
      where[us] = id;
    }
    // groups, samples and free ranks as the model has them
    std::int32_t open_groups = 0;
    for (std::int32_t m = 0; m < 2; ++m) {
      std::int32_t busy = 0;
      a.for_each_group(m, [&](std::int32_t id) {
        ++open_groups;
        REQUIRE(model.count(id) == 1);
        CHECK(a.group_at(id).samples == model[id]);
        busy += a.group_at(id).cp;
      });
      CHECK(a.free_block(m, 1).has_value() == (busy < 8));
    }
    CHECK(open_groups == static_cast<std::int32_t>(model.size()));
    // each round's maximum: the largest of its groups' loads summed again from the model (a
    // removal works it out again only where its group held it, or from the other groups'
    // largest load); a group's place names it
    for (std::int32_t m = 0; m < 2; ++m) {
      double most = 0;
      a.for_each_group(m, [&](std::int32_t id) {
        double load = 0;
        for (const std::int32_t s2 : model[id])
          load += a.cost_of(s2);
        most = std::max(most, load);
        CHECK(a.id_at(m, a.slot_of(id)) == id);
      });
      CHECK(a.max_load(m) == most);
    }
    for (std::size_t s2 = 0; s2 < where.size(); ++s2)
      CHECK(a.group_of(static_cast<std::int32_t>(s2)) == where[s2]);
    // rounds by free ranks: most first, then by round
    std::vector<std::pair<std::int32_t, std::int32_t>> walk;
    a.by_free_ranks([&](std::int32_t free, std::int32_t m) {
      walk.emplace_back(-free, m);
      return false;
    });
    CHECK(walk.size() == 2);
    CHECK(std::is_sorted(walk.begin(), walk.end()));
  }
  // the open groups' sums added up again (`consistent` wants every sample placed)
  for (const auto& [id, list] : model) {
    double load = 0;
    std::int64_t tokens = 0;
    for (const std::int32_t s : list) {
      load += a.cost_of(s);
      tokens += b.costs.tokens(s, a.group_at(id).cp);
      CHECK(a.cp_of(s) == a.group_at(id).cp);
    }
    CHECK(a.group_at(id).load == load);
    CHECK(a.group_at(id).tokens == tokens);
  }
}

TEST_CASE("assignment: rounds taken over drop their empty groups and free those ranks") {
  const dcpp::plan_options o = options_for(4, 4096);
  const std::vector<std::int64_t> lengths = {1000, 2000, 3000};
  const batch b(o, lengths, tabulation::none);
  std::vector<d::microbatch_state> rounds;
  rounds.emplace_back(4);
  const std::int32_t g0 = rounds[0].open(0, 1);
  rounds[0].open(1, 1); // stays empty
  const std::int32_t g2 = rounds[0].open(2, 2);
  d::sample_sizes sizes{{1, 2, 1}, {}};
  for (std::int32_t s = 0; s < 3; ++s)
    sizes.cost.push_back(b.costs.cost(s, sizes.cp[static_cast<std::size_t>(s)]));
  rounds[0].add(g0, 0, b.costs.tokens(0, 1), sizes.cost[0]);
  rounds[0].add(g0, 2, b.costs.tokens(2, 1), sizes.cost[2]);
  rounds[0].add(g2, 1, b.costs.tokens(1, 2), sizes.cost[1]);
  const state a = state::from_rounds(b.costs, std::move(rounds), sizes);
  check_state(a, b);
  CHECK(a.group_ids() == 2);
  CHECK(a.free_block(0, 1) == 1); // the empty group's rank
  CHECK(a.max_load(0) == std::max(sizes.cost[0] + sizes.cost[2], sizes.cost[1]));
}
