// validate(plan): every sample exactly once, legal disjoint groups, no rank over budget.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

//! Checks a plan against the options it claims to satisfy. Returns the first violation, naming
//! the micro-batch, group, rank or sample. Used by the planner on every plan it returns, by the
//! CLI on plans it reads, and by the tests.
inline status validate(const plan& p, const plan_options& o) {
  using enum status_code;
  auto fail = [](std::string message, std::int64_t sample = -1) {
    return status::failure(invalid_plan, std::move(message), sample);
  };
  // the options first: the checks below divide by them and index by them (a plan file's
  // options are input like any other)
  if (status s = check_options(o); !s)
    return fail(fmt::format("options: {}", s.message));
  std::int64_t total = 0;
  for (std::size_t s = 0; s < p.lengths.size(); ++s) {
    if (p.lengths[s] <= 0 || p.lengths[s] > max_batch_tokens - total)
      return fail(fmt::format("sample {}: length = {} must be positive, and the batch's tokens "
                              "at most {}",
                              s, p.lengths[s], max_batch_tokens),
                  static_cast<std::int64_t>(s));
    total += p.lengths[s];
  }
  if (p.world_size != o.world_size)
    return fail(
        fmt::format("world_size = {} differs from the options' {}", p.world_size, o.world_size));
  if (p.max_tokens_per_rank != o.max_tokens_per_rank)
    return fail(fmt::format("max_tokens_per_rank = {} differs from the options' {}",
                            p.max_tokens_per_rank, o.max_tokens_per_rank));
  if (p.microbatches.size() % static_cast<std::size_t>(o.microbatch_multiple) != 0)
    return fail(fmt::format("{} micro-batches is not a multiple of microbatch_multiple = {}",
                            p.microbatches.size(), o.microbatch_multiple));
  const std::size_t n = p.lengths.size();
  std::vector<std::int32_t> seen(n, -1); // micro-batch where each sample was placed
  std::vector<std::int32_t> owner(static_cast<std::size_t>(o.world_size));
  for (std::size_t m = 0; m < p.microbatches.size(); ++m) {
    std::fill(owner.begin(), owner.end(), -1);
    const auto& groups = p.microbatches[m].groups;
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      const auto& g = groups[gi];
      if (!is_legal_group(o, g.first_rank, g.cp))
        return fail(fmt::format("micro-batch {} group {}: ranks [{}, {}) with cp = {} is not a "
                                "legal {} group (min_cp = {}, max_cp = {}, world_size = {})",
                                m, gi, g.first_rank, std::int64_t{g.first_rank} + g.cp, g.cp,
                                to_string(o.group_topology), o.min_cp, o.effective_max_cp(),
                                o.world_size));
      if (g.samples.empty())
        return fail(fmt::format("micro-batch {} group {}: no samples", m, gi));
      for (std::int32_t r = g.first_rank; r < g.first_rank + g.cp; ++r) {
        auto& who = owner[static_cast<std::size_t>(r)];
        if (who >= 0)
          return fail(
              fmt::format("micro-batch {}: rank {} is in group {} and group {}", m, r, who, gi));
        who = static_cast<std::int32_t>(gi);
      }
      std::int64_t tokens = 0;
      for (const std::int32_t s : g.samples) {
        if (s < 0 || static_cast<std::size_t>(s) >= n)
          return fail(
              fmt::format("micro-batch {} group {}: sample id {} is outside [0, {})", m, gi, s, n),
              s);
        if (seen[static_cast<std::size_t>(s)] >= 0)
          return fail(fmt::format("sample {} appears twice (micro-batches {} and {})", s,
                                  seen[static_cast<std::size_t>(s)], m),
                      s);
        seen[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(m);
        tokens += tokens_per_rank(o, p.lengths[static_cast<std::size_t>(s)], g.cp);
      }
      if (tokens > o.max_tokens_per_rank)
        return fail(fmt::format("micro-batch {} group {} (ranks [{}, {})): {} tokens per rank "
                                "exceed max_tokens_per_rank = {}",
                                m, gi, g.first_rank, std::int64_t{g.first_rank} + g.cp, tokens,
                                o.max_tokens_per_rank));
    }
    if (o.group_topology == topology::megatron)
      if (const auto idle = std::find(owner.begin(), owner.end(), -1); idle != owner.end())
        return fail(fmt::format("micro-batch {}: rank {} runs no sample (the megatron topology "
                                "keeps every rank busy in every micro-batch)",
                                m, idle - owner.begin()));
  }
  for (std::size_t s = 0; s < n; ++s)
    if (seen[s] < 0)
      return fail(fmt::format("sample {} (length {}) is in no micro-batch", s, p.lengths[s]),
                  static_cast<std::int64_t>(s));
  return status::success();
}

} // namespace dcpp
