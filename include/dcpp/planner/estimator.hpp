// The workload-estimator concept and the simplest model of it, length^2 / cp.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>

namespace dcpp {

//! A workload estimator: `cost(length, cp)` is the time, on each rank of a group of `cp` ranks,
//! to run one sample of `length` tokens (forward and backward). Any unit, as long as it is the
//! same for every call: plans compare sums and maxima of costs.
//! Contract (not checkable by syntax): deterministic, finite, non-negative, non-decreasing in
//! `length`.
template <class E>
concept workload_estimator = std::copyable<E> &&
    requires(const E& e, std::int64_t length, std::int32_t cp) {
  { e.cost(length, cp) } -> std::convertible_to<double>;
};

//! The estimator's own price of one micro-batch (kernel launches, the per-micro-batch
//! collectives of the dynamic mesh), in its unit: `e.microbatch_overhead()` when the estimator
//! offers it (a number, or an optional that may be empty: a calibration without micro-batch
//! rows), else none. The planner's overhead is the plan option when set, else this, else a
//! share of the batch's own work (`dcpp::microbatch_overhead(problem, estimator)`, costs.hpp).
template <class E>
std::optional<double> estimator_overhead(const E& e) {
  if constexpr (requires { e.microbatch_overhead(); }) {
    const auto value = e.microbatch_overhead();
    if constexpr (requires { value.has_value(); })
      return value ? std::optional<double>(static_cast<double>(*value)) : std::nullopt;
    else
      return static_cast<double>(value);
  } else {
    return std::nullopt;
  }
}

//! `length^2 / cp`: the cost view of Megatron-LM's dynamic-CP scheduler. Used for parity with
//! Megatron's plans; it ignores the linear layers and the ring's communication, so as a target
//! alone it is degenerate: one group of all ranks always minimises it (`megatron_cost` in
//! transformer_cost.hpp adds the ring's price).
struct length_squared_cost {
  [[nodiscard]] static std::string name() { return "length^2/cp"; }
  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const noexcept {
    const auto l = static_cast<double>(length);
    return l * l / static_cast<double>(cp);
  }
};
static_assert(workload_estimator<length_squared_cost>);

} // namespace dcpp
