// Helpers the planner's tests share: options, seeded random batches, and an independent check
// of a plan's invariants (what `validate` checks, written again, plus the lower bound).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "dcpp/planner/bucketing.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/planner/transformer_cost.hpp"
#include "dcpp/workload/generators.hpp"

namespace dcpp_test::planning {

//! Options with world size and token budget set, the rest default.
//! The h100 preset on one network tier (the inter-node rate raised to NVLink's): the model the
//! portfolio's numbers were measured on before the network had tiers, which the tests of those
//! numbers keep.
inline dcpp::transformer_cost one_tier_h100() {
  dcpp::device_spec d = dcpp::device_presets[0];
  d.network.inter_node = d.network.intra_node;
  return {dcpp::model_presets[0], d};
}

inline dcpp::plan_options options_for(std::int32_t world, std::int64_t budget) {
  dcpp::plan_options o;
  o.world_size = world;
  o.max_tokens_per_rank = budget;
  return o;
}

inline dcpp::plan_options random_options(dcpp::workload::rng& r) {
  static constexpr std::int32_t worlds[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48};
  dcpp::plan_options o;
  o.world_size = worlds[r.uniform_int(0, 10)];
  o.max_tokens_per_rank = r.uniform_int(2, 5000);
  o.padding_unit = r.uniform_int(0, 3) == 0 ? r.uniform_int(1, 8) : 1;
  o.max_tokens_per_rank = std::max(o.max_tokens_per_rank, 2 * o.padding_unit);
  o.group_topology =
      r.uniform_int(0, 3) == 0 ? dcpp::topology::contiguous : dcpp::topology::aligned;
  o.microbatch_multiple =
      r.uniform_int(0, 4) == 0 ? static_cast<std::int32_t>(r.uniform_int(2, 4)) : 1;
  if (r.uniform_int(0, 5) == 0)
    o.max_cp = o.group_topology == dcpp::topology::aligned
                   ? std::int32_t{1} << r.uniform_int(
                         0, std::bit_width(static_cast<unsigned>(o.world_size)) - 1)
                   : static_cast<std::int32_t>(r.uniform_int(1, o.world_size));
  return o;
}

inline std::vector<std::int64_t> random_lengths(dcpp::workload::rng& r,
                                                const dcpp::plan_options& o) {
  const std::int64_t cap = dcpp::max_plannable_length(o);
  const std::size_t n = static_cast<std::size_t>(r.uniform_int(1, 120));
  std::vector<std::int64_t> lengths(n);
  for (auto& l : lengths) {
    const auto kind = r.uniform_int(0, 9);
    l = kind == 0  ? cap
        : kind < 3 ? r.uniform_int(1, cap)
                   : r.uniform_int(1, std::max<std::int64_t>(1, cap / 16));
  }
  return lengths;
}

template <class Packing, class Estimator>
dcpp::plan run(const dcpp::plan_options& o, const std::vector<std::int64_t>& lengths,
               const Estimator& e, Packing packing = {}) {
  return dcpp::planner<Estimator, Packing>(o, e, packing).make_plan(lengths);
}

// checks what validate checks, independently, plus the bound
inline void check_invariants(const dcpp::plan& p, const dcpp::plan_options& o) {
  std::vector<int> seen(p.lengths.size(), 0);
  for (const auto& mb : p.microbatches) {
    std::vector<int> covered(static_cast<std::size_t>(o.world_size), 0);
    for (const auto& g : mb.groups) {
      REQUIRE(g.cp >= 1);
      REQUIRE(g.first_rank >= 0);
      REQUIRE(g.first_rank + g.cp <= o.world_size);
      if (o.group_topology == dcpp::topology::aligned) {
        CHECK(dcpp::is_power_of_two(g.cp));
        CHECK(g.first_rank % g.cp == 0);
      }
      CHECK(g.cp <= o.effective_max_cp());
      for (std::int32_t r = g.first_rank; r < g.first_rank + g.cp; ++r)
        ++covered[static_cast<std::size_t>(r)];
      std::int64_t tokens = 0;
      for (const auto s : g.samples) {
        ++seen[static_cast<std::size_t>(s)];
        const std::int64_t unit = 2 * g.cp * o.padding_unit;
        tokens += (p.lengths[static_cast<std::size_t>(s)] + unit - 1) / unit * unit / g.cp;
      }
      CHECK(tokens <= o.max_tokens_per_rank);
    }
    for (const int c : covered)
      CHECK(c <= 1);
  }
  for (const int c : seen)
    CHECK(c == 1);
  CHECK(p.microbatches.size() % static_cast<std::size_t>(o.microbatch_multiple) == 0);
  CHECK(p.metrics.estimated_step_time >= p.metrics.lower_bound * (1 - 1e-9));
  CHECK(p.metrics.efficiency <= 1.0 + 1e-9);
}

} // namespace dcpp_test::planning
