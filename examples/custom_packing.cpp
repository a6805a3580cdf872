// A packing policy of your own, written against public names only (docs/policies.md): longest
// sample first, each on the smallest group it fits, into the first micro-batch with a free block
// of ranks; a new micro-batch when none has one. It ignores the costs (a baseline to beat, not a
// good policy); dcpp's planner canonicalises, evaluates and validates what it returns, like any
// policy's plan.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <dcpp/dcpp.hpp>

// [custom-packing]
struct longest_first {
  static constexpr std::string_view name = "longest_first";

  template <dcpp::workload_estimator Estimator>
  [[nodiscard]] dcpp::plan pack(const dcpp::problem& pr, const Estimator&) const {
    std::vector<std::int32_t> order(pr.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      return pr.lengths[static_cast<std::size_t>(a)] > pr.lengths[static_cast<std::size_t>(b)];
    });
    dcpp::plan_builder plan(pr, name);
    for (const std::int32_t s : order) {
      const std::int32_t cp = pr.min_cp_of[static_cast<std::size_t>(s)]; // smallest that fits
      std::size_t mb = 0;
      std::optional<std::int32_t> first;
      for (; mb < plan.microbatches() && !(first = plan.free_block(mb, cp)); ++mb) {
      }
      if (!first) // no micro-batch has room: a new one
        first = plan.free_block(mb = plan.add_microbatch(), cp);
      plan.add_group(mb, *first, cp, std::vector<std::int32_t>{s});
    }
    return std::move(plan).finish();
  }
};
static_assert(dcpp::packing_policy<longest_first, dcpp::length_squared_cost>);
// [custom-packing]

int main() {
  std::vector<std::int64_t> lengths;
  std::uint64_t x = 12345;
  for (int i = 0; i < 300; ++i) { // a seeded long-tailed batch
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    lengths.push_back(
        static_cast<std::int64_t>(64 + (x >> 33) % 4000 + (i % 37 == 0 ? (x >> 20) % 60000 : 0)));
  }
  dcpp::plan_options options;
  options.world_size = 16;
  options.max_tokens_per_rank = 8192;
  // [use-custom-packing]
  const dcpp::planner<dcpp::length_squared_cost, longest_first> mine(options);
  const dcpp::plan p = mine.make_plan(lengths); // canonicalised, evaluated and validated
  // [use-custom-packing]
  const dcpp::plan q = dcpp::planner<dcpp::length_squared_cost>(options).make_plan(lengths);
  fmt::print("{}: {} micro-batches, efficiency {:.4f}; balanced: {} micro-batches, efficiency "
             "{:.4f}\n",
             p.policy, p.microbatches.size(), p.metrics.efficiency, q.microbatches.size(),
             q.metrics.efficiency);
  return p.policy == "longest_first" && dcpp::validate(p, options) ? 0 : 1;
}
