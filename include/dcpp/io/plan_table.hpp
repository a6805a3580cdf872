// A human table of a plan: fmt::formatter<dcpp::plan> (opt-in: include this header).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <fmt/format.h>

#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

//! "cp16x2 cp4x1 cp1x12": the group sizes of a micro-batch, largest first.
inline std::string cp_histogram(const plan_microbatch& mb) {
  std::map<std::int32_t, std::int32_t, std::greater<>> counts;
  for (const auto& g : mb.groups)
    ++counts[g.cp];
  std::string out;
  for (const auto& [cp, n] : counts)
    out += fmt::format("{}cp{}x{}", out.empty() ? "" : " ", cp, n);
  return out;
}

} // namespace dcpp

//! Prints a summary line and one row per micro-batch: groups by CP size, samples, max and mean
//! rank time, balance (mean/max), idle ranks, max tokens on a rank.
template <>
struct fmt::formatter<dcpp::plan> {
  constexpr auto parse(format_parse_context& ctx) { return ctx.begin(); }

  template <class FormatContext>
  auto format(const dcpp::plan& p, FormatContext& ctx) const {
    auto out = ctx.out();
    const auto& m = p.metrics;
    out = fmt::format_to(
        out,
        "plan: {} samples on {} ranks (max {} tokens/rank), policy {}, estimator "
        "{}\n  step time {:.6g}, lower bound {:.6g}, efficiency {:.4f}, {} "
        "micro-batch{} (token minimum {}), {} idle rank slots, planned in {:.3f} ms\n",
        p.lengths.size(), p.world_size, p.max_tokens_per_rank, p.policy.empty() ? "?" : p.policy,
        p.estimator.empty() ? "?" : p.estimator, m.estimated_step_time, m.lower_bound, m.efficiency,
        p.microbatches.size(), p.microbatches.size() == 1 ? "" : "es", m.min_microbatches,
        m.idle_rank_slots, m.plan_seconds * 1e3);
    out = fmt::format_to(out, "  {:>4} {:>11} {:>11} {:>7} {:>5} {:>8} {:>7}  {}\n", "mb",
                         "max time", "mean time", "balance", "idle", "samples", "tokens", "groups");
    for (std::size_t i = 0; i < p.microbatches.size(); ++i) {
      const auto& mb = p.microbatches[i];
      double area = 0;
      std::int64_t tokens = 0;
      std::size_t samples = 0;
      for (const auto& g : mb.groups) {
        area += g.time * g.cp;
        tokens = std::max(tokens, g.tokens);
        samples += g.samples.size();
      }
      const double mean = p.world_size > 0 ? area / p.world_size : 0.0;
      out = fmt::format_to(out, "  {:>4} {:>11.5g} {:>11.5g} {:>7.3f} {:>5} {:>8} {:>7}  {}\n", i,
                           mb.time, mean, mb.time > 0 ? mean / mb.time : 1.0, mb.idle_ranks,
                           samples, tokens, dcpp::cp_histogram(mb));
    }
    return out;
  }
};
