// What every router proves before it routes: the ranks hold a plan for this world, the same plan
// and the same sample origins; then each rank's routes. Shared by the host router and its Thrust
// twin (and free of the planner, so that device code can include it).
#pragma once

#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/error.hpp"
#include "dcpp/planner/plan.hpp"
#include "dcpp/planner/plan_hash.hpp"
#include "dcpp/route/route.hpp"

namespace dcpp {

namespace detail {
//! Tokens of rank `rank`'s samples under `origins` (what each field of its shard holds).
[[nodiscard]] inline std::int64_t shard_tokens_of(const plan& p, const sample_origins& origins,
                                                  int rank) {
  std::int64_t t = 0;
  const auto me = static_cast<std::size_t>(rank);
  for (auto s = origins.first_sample[me]; s < origins.first_sample[me + 1]; ++s)
    t += p.lengths[static_cast<std::size_t>(s)];
  return t;
}

//! What a router's construction proves collectively (every rank holds a plan for this world,
//! the same plan and the same sample origins), then this rank's route of every micro-batch.
template <plan_communicator C>
std::vector<rank_route> agreed_routes(C& comm, const plan& p, const sample_origins& origins,
                                      std::int64_t padding_unit) {
  status local = status::success();
  if (p.world_size != comm.size())
    local = status::failure(status_code::invalid_plan,
                            fmt::format("the plan is for world_size = {}, the communicator has "
                                        "{} ranks",
                                        p.world_size, comm.size()));
  else if (origins.first_sample.size() != static_cast<std::size_t>(comm.size()) + 1 ||
           origins.rank.size() != p.lengths.size())
    local = status::failure(status_code::invalid_plan,
                            fmt::format("sample origins cover {} samples on {} ranks; the plan "
                                        "has {} samples on {} ranks",
                                        origins.rank.size(), origins.first_sample.size() - 1,
                                        p.lengths.size(), comm.size()));
  throw_unless_agreed(comm, local);
  check_same_everywhere(comm, plan_hash(p), "the plan (hash)");
  std::uint64_t h = 1469598103934665603ULL;
  for (const std::int64_t f : origins.first_sample)
    h = (h ^ static_cast<std::uint64_t>(f)) * 1099511628211ULL;
  check_same_everywhere(comm, h, "the number of samples on each rank");
  std::vector<rank_route> routes;
  routes.reserve(p.microbatches.size());
  for (std::size_t m = 0; m < p.microbatches.size(); ++m)
    routes.push_back(make_rank_route(p, origins, m, comm.rank(), padding_unit));
  return routes;
}
} // namespace detail

} // namespace dcpp
