// planner<Estimator, Packing, Communicator>: policies in, a validated plan out.
#pragma once

#include <bit>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/plan_communicator.hpp"
#include "dcpp/error.hpp"
#include "dcpp/planner/bounds/budget_lower_bound.hpp"
#include "dcpp/planner/bucketing.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/occupy.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced.hpp"
#include "dcpp/planner/plan.hpp"
#include "dcpp/planner/plan_hash.hpp"
#include "dcpp/planner/transformer_cost.hpp"
#include "dcpp/planner/validate.hpp"

namespace dcpp {

//! Hash of the options, for the collective agreement check.
inline std::uint64_t options_hash(const plan_options& o) {
  plan shell;
  shell.world_size = o.world_size;
  shell.max_tokens_per_rank = o.max_tokens_per_rank;
  shell.lengths = {o.min_cp,
                   o.max_cp,
                   static_cast<std::int64_t>(o.group_topology),
                   o.padding_unit,
                   o.microbatch_multiple,
                   o.microbatch_overhead ? 1 : 0,
                   std::bit_cast<std::int64_t>(o.microbatch_overhead.value_or(0.0))};
  return plan_hash(shell);
}

//! Checks collectively that every rank was given the same plan options (their hash, one min
//! and one max all-reduction); where they differ, names the first option the ranks disagree on
//! with its smallest and largest value over the ranks (per option, in a fixed order, so that
//! every rank throws the same error): a hash alone told the user nothing to fix. `who` begins
//! the message.
template <plan_communicator C>
void check_same_options(C& comm, const plan_options& o, std::string_view who) {
  const std::uint64_t oh = options_hash(o);
  if (comm.all_reduce_min(oh) == comm.all_reduce_max(oh))
    return;
  constexpr std::uint64_t flip = std::uint64_t{1} << 63; // signed order as unsigned order
  const auto check = [&](const char* name, std::int64_t value, auto show) {
    const std::uint64_t u = std::bit_cast<std::uint64_t>(value) ^ flip;
    const std::uint64_t lo = comm.all_reduce_min(u);
    const std::uint64_t hi = comm.all_reduce_max(u);
    if (lo != hi)
      throw error(status_code::communication_error,
                  fmt::format("{}: ranks were given different plan options: {} ranges from {} "
                              "to {} over the ranks",
                              who, name, show(std::bit_cast<std::int64_t>(lo ^ flip)),
                              show(std::bit_cast<std::int64_t>(hi ^ flip))));
  };
  const auto integer = [](std::int64_t v) { return fmt::format("{}", v); };
  const auto topology_of = [](std::int64_t v) {
    return std::string(to_string(static_cast<topology>(v)));
  };
  const auto seconds = [](std::int64_t v) { return fmt::format("{}", std::bit_cast<double>(v)); };
  check("world_size", o.world_size, integer);
  check("max_tokens_per_rank", o.max_tokens_per_rank, integer);
  check("min_cp", o.min_cp, integer);
  check("max_cp", o.max_cp, integer);
  check("group_topology", static_cast<std::int64_t>(o.group_topology), topology_of);
  check("padding_unit", o.padding_unit, integer);
  check("microbatch_multiple", o.microbatch_multiple, integer);
  check("microbatch_overhead given", o.microbatch_overhead ? 1 : 0, integer);
  // overheads are >= 0: their bits order as the values do
  check("microbatch_overhead", std::bit_cast<std::int64_t>(o.microbatch_overhead.value_or(0.0)),
        seconds);
  throw error(status_code::communication_error,
              fmt::format("{}: ranks were given different plan options", who));
}

//! Plans dynamic CP: a pure, deterministic function of (lengths, options, policies).
//! * `can_plan(lengths)`: cheap check, never throws;
//! * `make_plan(lengths)`: throws `dcpp::error` when the check fails; the returned plan is
//!   canonical, evaluated under the estimator, and has passed `validate`;
//! * `plan_distributed(local_lengths)`: all-gathers every rank's lengths through the
//!   communicator, plans, and checks collectively that every rank holds the same plan.
//! The order in which a packing policy takes samples (bucketing) is the packing policy's own:
//! e.g. `balanced_with<single_bucket>`.
template <workload_estimator Estimator = transformer_cost, class Packing = balanced,
          plan_communicator Communicator = serial_communicator>
requires packing_policy<Packing, Estimator>
class planner {
public:
  using estimator_type = Estimator;
  using packing_type = Packing;
  using communicator_type = Communicator;

  explicit planner(plan_options options, Estimator estimator = {}, Packing packing = {},
                   Communicator communicator = {})
      : options_(options), estimator_(std::move(estimator)), packing_(std::move(packing)),
        communicator_(std::move(communicator)) {}

  [[nodiscard]] status can_plan(std::span<const std::int64_t> lengths) const noexcept {
    if (status s = check_problem(options_, lengths); !s)
      return s;
    if (status s = check_occupiable(options_, lengths.size()); !s)
      return s;
    if constexpr (requires { packing_.check(std::declval<const problem&>()); }) {
      try {
        return packing_.check(make_problem(options_, lengths));
      } catch (const error& e) {
        return e.why();
      }
    }
    return status::success();
  }

  [[nodiscard]] plan make_plan(std::span<const std::int64_t> lengths) const {
    const auto start = std::chrono::steady_clock::now();
    problem pr = make_problem(options_, lengths);
    throw_if_failed(check_occupiable(options_, lengths.size()));
    if constexpr (requires { packing_.check(pr); })
      throw_if_failed(packing_.check(pr));
    tabulate_costs(pr, estimator_);
    plan p = packing_.pack(pr, estimator_);
    if (options_.group_topology == topology::megatron)
      occupy_every_rank(p, pr, estimator_); // Megatron-LM's consumers index every rank's list
    if constexpr (requires { estimator_.name(); })
      p.estimator = estimator_.name();
    if constexpr (requires { estimator_.network(); })
      p.network = estimator_.network();
    canonicalize(p);
    evaluate(p, pr, estimator_);
    p.metrics.plan_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (status s = validate(p, options_); !s)
      throw error(
          status_code::invalid_plan,
          fmt::format("packing policy {} produced an invalid plan: {}", Packing::name, s.message),
          s.sample);
    return p;
  }

  //! Gathers the lengths of every rank (rank order), plans, and proves agreement: options and
  //! plan hashes are compared with min/max all-reductions, so every rank throws the same error
  //! instead of some ranks hanging in a later collective.
  [[nodiscard]] plan plan_distributed(std::span<const std::int64_t> local_lengths) {
    check_same_options(communicator_, options_, "plan_distributed");
    const std::vector<std::int64_t> lengths = communicator_.all_gather_v(local_lengths);
    plan p = make_plan(lengths); // every rank sees the same lengths, so fails the same way
    const std::uint64_t ph = plan_hash(p);
    if (communicator_.all_reduce_min(ph) != communicator_.all_reduce_max(ph))
      throw error(status_code::communication_error,
                  fmt::format("plan_distributed: rank {} computed a plan (hash {:016x}) that "
                              "differs from another rank's",
                              communicator_.rank(), ph));
    return p;
  }

  [[nodiscard]] const plan_options& options() const noexcept { return options_; }
  [[nodiscard]] const Estimator& estimator() const noexcept { return estimator_; }
  [[nodiscard]] const Packing& packing() const noexcept { return packing_; }
  [[nodiscard]] Communicator& communicator() noexcept { return communicator_; }

private:
  plan_options options_;
  // Policies are often empty types; no_unique_address keeps them from taking space (and keeps
  // GCC 12's -Wmaybe-uninitialized from flagging an empty estimator passed by reference).
  [[no_unique_address]] Estimator estimator_;
  [[no_unique_address]] Packing packing_;
  [[no_unique_address]] Communicator communicator_;
};

} // namespace dcpp
