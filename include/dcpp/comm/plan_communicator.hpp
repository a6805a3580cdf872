// The planner's communicator slot: the collectives it needs to plan identically on every rank.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

namespace dcpp {

//! What the planner needs from a communicator: its rank and size, a variable-count all-gather
//! of integers (rank order), and min/max all-reductions of a 64-bit value (agreement checks).
//! The communicator backends (local threads, MPI, NCCL) model this and more.
template <class C>
concept plan_communicator = requires(C& c, std::span<const std::int64_t> local,
                                     std::uint64_t value) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  { c.all_gather_v(local) } -> std::same_as<std::vector<std::int64_t>>;
  { c.all_reduce_min(value) } -> std::same_as<std::uint64_t>;
  { c.all_reduce_max(value) } -> std::same_as<std::uint64_t>;
};

//! One process, one rank: the default when the caller gathers lengths itself.
struct serial_communicator {
  [[nodiscard]] int rank() const noexcept { return 0; }
  [[nodiscard]] int size() const noexcept { return 1; }
  std::vector<std::int64_t> all_gather_v(std::span<const std::int64_t> local) {
    return {local.begin(), local.end()};
  }
  std::uint64_t all_reduce_min(std::uint64_t value) { return value; }
  std::uint64_t all_reduce_max(std::uint64_t value) { return value; }
};
static_assert(plan_communicator<serial_communicator>);

} // namespace dcpp
