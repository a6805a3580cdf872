// planner<Estimator, Packing, Communicator>: policies in, a validated plan out.
#pragma once

#include <bit>
#include <chrono>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/plan_communicator.hpp"
#include "dcpp/error.hpp"
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
    const std::uint64_t oh = options_hash(options_);
    if (communicator_.all_reduce_min(oh) != communicator_.all_reduce_max(oh))
      throw error(status_code::communication_error,
                  "plan_distributed: ranks were given different plan options");
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
