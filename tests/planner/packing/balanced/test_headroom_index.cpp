// Tests for balanced/headroom_index.hpp: the round index walks the groups of a size in the order
// of (minus the headroom, id), runs of equal headroom and stops midway included. (That the heap
// and the round index lead the local search to the same plans is tested with the search, in
// test_local_search.cpp.)
#include "../../../support.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "dcpp/planner/packing/balanced/headroom_index.hpp"
#include "dcpp/workload/generators.hpp"

namespace d = dcpp::detail;

namespace {
//! What the headroom index reads of an assignment: each group's round and load, each round's
//! maximum (here the largest load filed in it, as in an assignment).
struct fake_groups {
  struct group {
    double load = 0;
  };
  std::vector<std::int32_t> round;
  std::vector<group> groups;
  std::vector<double> max;
  [[nodiscard]] std::int32_t round_of(std::int32_t id) const {
    return round[static_cast<std::size_t>(id)];
  }
  [[nodiscard]] const group& group_at(std::int32_t id) const {
    return groups[static_cast<std::size_t>(id)];
  }
  [[nodiscard]] double max_load(std::int32_t r) const { return max[static_cast<std::size_t>(r)]; }
};
} // namespace

TEST_CASE("headroom index: the round index walks by (minus the headroom, id), runs of equal "
          "headroom included") {
  // Loads near 1 and far below it: 1 - 1e-17 rounds to 1, so distinct loads of one round share a
  // headroom there and the walk must order them by id, as the pairs compare; equal loads, loads
  // at the round's maximum and rounds without groups besides. After every change each size is
  // walked whole against the pairs sorted here, and in part (a walk that stops early, then one
  // to the end: the merge kept between them must be the same order).
  const double loads[] = {0.0, 1e-17, 2e-17, 3e-17, 0.25, 0.5, 1.0, 1.0 + 0x1p-52, 0.75, 2.0};
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    dcpp::workload::rng r(seed);
    const std::size_t ids = 37, rounds = 5, sizes = 3;
    fake_groups g;
    g.groups.resize(ids);
    g.max.assign(rounds, 0.0);
    for (std::size_t id = 0; id < ids; ++id)
      g.round.push_back(static_cast<std::int32_t>(r.uniform_int(0, rounds - 2))); // one empty
    std::vector<std::optional<std::size_t>> size_of(ids);
    d::round_headroom_index<fake_groups> index(g);
    index.reset(sizes);
    const auto set_max = [&] {
      std::fill(g.max.begin(), g.max.end(), 0.0);
      for (std::size_t id = 0; id < ids; ++id)
        if (size_of[id]) {
          double& m = g.max[static_cast<std::size_t>(g.round[id])];
          m = std::max(m, g.groups[id].load);
        }
    };
    std::int64_t runs = 0; // adjacent entries of one round with one headroom and two loads
    for (int step = 0; step < 400; ++step) {
      const auto id = static_cast<std::int32_t>(r.uniform_int(0, ids - 1));
      const auto u = static_cast<std::size_t>(id);
      if (r.uniform() < 0.2) {
        index.drop(id);
        size_of[u].reset();
      } else {
        g.groups[u].load =
            r.uniform() < 0.7 ? loads[r.uniform_int(0, std::size(loads) - 1)] : r.uniform() * 2;
        size_of[u] = static_cast<std::size_t>(r.uniform_int(0, sizes - 1));
        index.file(*size_of[u], id);
      }
      set_max();
      for (std::size_t size = 0; size < sizes; ++size) {
        std::vector<std::pair<double, std::int32_t>> expected;
        for (std::size_t k = 0; k < ids; ++k)
          if (size_of[k] == size)
            expected.emplace_back(-(g.max[static_cast<std::size_t>(g.round[k])] - g.groups[k].load),
                                  static_cast<std::int32_t>(k));
        std::sort(expected.begin(), expected.end());
        for (std::size_t k = 1; k < expected.size(); ++k) {
          const auto a = static_cast<std::size_t>(expected[k - 1].second);
          const auto b = static_cast<std::size_t>(expected[k].second);
          runs += expected[k - 1].first == expected[k].first && g.round[a] == g.round[b] &&
                  g.groups[a].load != g.groups[b].load;
        }
        const std::size_t stop = expected.size() / 2;
        std::vector<std::pair<double, std::int32_t>> part, whole;
        index.walk(size, [&](const auto& e) {
          part.push_back(e);
          return part.size() > stop;
        });
        index.walk(size, [&](const auto& e) {
          whole.push_back(e);
          return false;
        });
        CHECK(whole == expected);
        CHECK(part.size() == std::min(stop + 1, expected.size()));
        CHECK(std::equal(part.begin(), part.end(), expected.begin()));
      }
    }
    CHECK(runs > 0); // the rounding runs were met
  }
}
