// Tests for include/dcpp/planner/occupy.hpp and the megatron topology it serves: every plan made
// there meets Megatron-LM's consumer contract, checked here from the contract itself.
#include "../support.hpp"

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dcpp/dcpp.hpp"

namespace {

//! The group sizes Megatron-LM creates for dynamic CP on `world` ranks, written from its rule:
//! 2^i for i below floor(log2(world)) and at least `min_cp`, and the group of all ranks.
std::set<std::int32_t> megatron_sizes(std::int32_t world, std::int32_t min_cp) {
  std::set<std::int32_t> sizes{world};
  std::int32_t log = 0;
  while ((std::int64_t{2} << log) <= world)
    ++log;
  for (std::int32_t i = 0; i < log; ++i)
    if ((1 << i) >= min_cp)
      sizes.insert(1 << i);
  return sizes;
}

//! The whole contract, from per-rank lists as Megatron's consumer reads them: no rank lists
//! nothing; the ranks listing a group's first sample are consecutive, list the same samples and
//! number a size Megatron created, at a multiple of that size (the group of all ranks at 0); the
//! group's tokens (padding included) fit the budget; every sample once.
void check_contract(const dcpp::plan& p, const dcpp::plan_options& o) {
  const auto n = p.lengths.size();
  const auto sizes = megatron_sizes(o.world_size, o.min_cp);
  std::vector<int> seen(n, 0);
  REQUIRE(p.microbatches.size() % static_cast<std::size_t>(o.microbatch_multiple) == 0);
  for (std::size_t m = 0; m < p.microbatches.size(); ++m) {
    std::vector<std::vector<std::int32_t>> lists(static_cast<std::size_t>(o.world_size));
    for (const auto& g : p.microbatches[m].groups)
      for (std::int32_t r = g.first_rank; r < g.first_rank + g.cp; ++r)
        lists[static_cast<std::size_t>(r)] = g.samples;
    for (std::int32_t r = 0; r < o.world_size;) {
      const auto& mine = lists[static_cast<std::size_t>(r)];
      INFO("micro-batch ", m, " rank ", r);
      REQUIRE_FALSE(mine.empty());
      std::int32_t size = 0;
      for (std::int32_t q = 0; q < o.world_size; ++q) {
        const auto& other = lists[static_cast<std::size_t>(q)];
        if (std::find(other.begin(), other.end(), mine.front()) != other.end()) {
          CHECK(q == r + size); // consecutive
          CHECK(other == mine);
          ++size;
        }
      }
      CHECK(sizes.count(size) == 1);
      CHECK(r % size == 0);
      std::int64_t tokens = 0;
      for (const std::int32_t s : mine)
        tokens += dcpp::tokens_per_rank(o, p.lengths[static_cast<std::size_t>(s)], size);
      CHECK(tokens <= o.max_tokens_per_rank);
      for (const std::int32_t s : mine)
        ++seen[static_cast<std::size_t>(s)];
      r += size;
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
}

std::vector<std::int64_t> random_lengths(std::mt19937_64& rng, std::size_t n, std::int64_t most) {
  std::lognormal_distribution<double> d(7.0, 1.6);
  std::vector<std::int64_t> out(n);
  for (auto& x : out)
    x = std::clamp<std::int64_t>(static_cast<std::int64_t>(d(rng)), 1, most);
  return out;
}

} // namespace

TEST_CASE("topology: megatron's sizes are Megatron-LM's, aligned, with the group of all ranks") {
  for (const std::int32_t world : {1, 2, 3, 6, 8, 12, 20, 24, 32, 48, 96, 1024}) {
    for (const std::int32_t min_cp : {1, 2, 4}) {
      dcpp::plan_options o;
      o.world_size = world;
      o.min_cp = min_cp;
      o.group_topology = dcpp::topology::megatron;
      if (!dcpp::check_options(o))
        continue;
      const auto expected = megatron_sizes(world, min_cp);
      const auto got = dcpp::legal_cp_sizes(o);
      CHECK(std::set<std::int32_t>(got.begin(), got.end()) == expected);
      for (const std::int32_t cp : got)
        for (std::int32_t first = 0; first + cp <= world; ++first)
          CHECK(dcpp::is_legal_group(o, first, cp) == (first % cp == 0));
    }
  }
  CHECK(dcpp::topology_from_string("megatron") == dcpp::topology::megatron);
  CHECK(dcpp::to_string(dcpp::topology::megatron) == "megatron");
  CHECK_FALSE(dcpp::topology_from_string("Megatron"));
  dcpp::plan_options o;
  o.world_size = 24;
  o.group_topology = dcpp::topology::megatron;
  CHECK_FALSE(dcpp::is_legal_group(o, 0, 16)); // Megatron creates no group of 16 on 24 ranks
  CHECK(dcpp::is_legal_group(o, 16, 8));
  o.min_cp = 3;
  CHECK(dcpp::check_options(o).message == "min_cp = 3 must be a power of two or world_size = 24 "
                                          "in the megatron topology");
  o.min_cp = 16;
  CHECK(dcpp::check_options(o)); // only the group of all 24 ranks is left
  CHECK(dcpp::legal_cp_sizes(o) == std::vector<std::int32_t>{24});
  o.world_size = 20;
  o.min_cp = 8; // groups of 8 at ranks 0 and 8; ranks 16-19 only in the group of all
  CHECK(dcpp::check_options(o));
  CHECK(dcpp::legal_cp_sizes(o) == std::vector<std::int32_t>{8, 20});
  o.max_cp = 8;
  CHECK(dcpp::check_options(o).message ==
        "world_size = 20 is not a multiple of min_cp = 8 and max_cp = 8 leaves out the group of "
        "all ranks: ranks would be left without a group");
  o.world_size = 24;
  o.min_cp = 16;
  o.max_cp = 0;
  CHECK(dcpp::legal_cp_sizes(o) == std::vector<std::int32_t>{24});
}

TEST_CASE("occupy: every plan in the megatron topology meets Megatron's consumer contract") {
  std::mt19937_64 rng(20261201);
  const std::int32_t worlds[] = {1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 32, 48, 64, 96};
  const int trials = dcpp_test::quick() ? 60 : 400;
  int planned = 0, refused = 0;
  for (int t = 0; t < trials; ++t) {
    dcpp::plan_options o;
    o.world_size = worlds[rng() % std::size(worlds)];
    o.group_topology = dcpp::topology::megatron;
    o.max_tokens_per_rank = 1000 + static_cast<std::int64_t>(rng() % 7000);
    o.microbatch_multiple = std::vector<std::int32_t>{1, 1, 2, 4, 8}[rng() % 5];
    // a min_cp that does not divide the world leaves some ranks to the group of all
    o.min_cp = std::vector<std::int32_t>{1, 1, 2, 4, 8}[rng() % 5];
    if (!dcpp::check_options(o))
      o.min_cp = 1; // larger than the world
    const std::size_t n = 1 + rng() % (4 * static_cast<std::size_t>(o.world_size) + 8);
    const auto lengths = random_lengths(rng, n, o.max_tokens_per_rank * o.world_size / 2 + 1);
    INFO("trial ", t, ": ", n, " samples on ", o.world_size, " ranks, multiple ",
         o.microbatch_multiple, ", min_cp ", o.min_cp, ", budget ", o.max_tokens_per_rank);
    const auto run = [&](const auto& planner) {
      if (const dcpp::status s = planner.can_plan(lengths); !s) {
        // only the count of samples may refuse a plannable batch here
        CHECK(std::cmp_less(n, o.microbatch_multiple));
        ++refused;
        return;
      }
      const dcpp::plan p = planner.make_plan(lengths);
      check_contract(p, o);
      ++planned;
    };
    run(dcpp::planner<dcpp::megatron_cost>(o));
    run(dcpp::planner<dcpp::transformer_cost, dcpp::megatron_greedy>(o));
  }
  CHECK(planned > trials);
  CHECK(refused > 0);
}

TEST_CASE("occupy: a batch of fewer samples than ranks grows its groups to every rank") {
  dcpp::plan_options o;
  o.world_size = 24;
  o.max_tokens_per_rank = 4096;
  o.group_topology = dcpp::topology::megatron;
  const std::vector<std::int64_t> lengths{30000, 900, 700};
  const dcpp::plan p = dcpp::planner<dcpp::megatron_cost>(o).make_plan(lengths);
  check_contract(p, o);
  CHECK(p.metrics.idle_rank_slots == 0);
  // too few samples for the micro-batch multiple: refused before planning, naming both counts
  o.microbatch_multiple = 4;
  const dcpp::status s = dcpp::planner<dcpp::megatron_cost>(o).can_plan(lengths);
  CHECK(s.code == dcpp::status_code::infeasible);
  CHECK(s.message == "the batch holds 3 samples, fewer than microbatch_multiple = 4: in the "
                     "megatron topology every rank runs a sample in every micro-batch");
}

TEST_CASE("occupy: validate refuses an idle rank in the megatron topology") {
  dcpp::plan_options o;
  o.world_size = 4;
  o.group_topology = dcpp::topology::megatron;
  dcpp::plan p;
  p.world_size = 4;
  p.max_tokens_per_rank = o.max_tokens_per_rank;
  p.lengths = {100, 200};
  p.microbatches.push_back({{{0, 2, {0}}, {2, 1, {1}}}, 0, 0});
  CHECK(dcpp::validate(p, o).message == "micro-batch 0: rank 3 runs no sample (the megatron "
                                        "topology keeps every rank busy in every micro-batch)");
  p.microbatches[0].groups[1].cp = 2;
  CHECK(dcpp::validate(p, o));
}

TEST_CASE("estimator: megatron_cost is length^2/cp with the ring's price") {
  const dcpp::megatron_cost e;
  const dcpp::length_squared_cost l2;
  for (const std::int64_t length : {1, 100, 4096, 131072})
    CHECK(e.cost(length, 1) == l2.cost(length, 1));
  // the ring term is the transformer model's, in units of one token^2 of attention: the
  // difference of the two models at any size is the linear layers' alone
  const dcpp::transformer_cost t;
  for (const std::int64_t length : {512, 8192, 65536})
    for (const std::int32_t cp : {1, 2, 8, 16, 64}) {
      const double linear = t.cost(length, 1) - e.cost(length, 1) * e.seconds_per_unit();
      CHECK(t.cost(length, cp) - e.cost(length, cp) * e.seconds_per_unit() ==
            doctest::Approx(linear / cp).epsilon(1e-9));
    }
  // a group of all ranks no longer minimises it: short samples are cheapest on one rank, and
  // a long one's least time is on a bounded group
  CHECK(e.cost(1024, 1) < e.cost(1024, 2));
  double best = e.cost(262144, 1);
  std::int32_t at = 1;
  for (std::int32_t cp = 2; cp <= 1024; cp *= 2)
    if (e.cost(262144, cp) < best)
      best = e.cost(262144, cp), at = cp;
  CHECK(at > 1);
  CHECK(at < 1024);
  // the network decides the tier: a group of 16 on nodes of 8 pays the inter-node rate
  dcpp::network_spec big_nodes;
  big_nodes.gpus_per_node = 16;
  CHECK(e.with_network(big_nodes).cost(4096, 16) < e.cost(4096, 16));
}
