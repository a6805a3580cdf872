// The network a plan runs on: GPUs per node and the link tier a CP group's ring crosses.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "dcpp/error.hpp"

namespace dcpp {

//! One tier of links: sustained bytes per second in one direction between ring neighbours, and
//! the fixed time of one ring-step message.
struct link_tier {
  double bytes_per_second = 0;
  double latency = 0;
  friend bool operator==(const link_tier&, const link_tier&) = default;
};

//! Two tiers: every GPU of a node reaches the others over `intra_node` (NVLink), nodes reach
//! each other over `inter_node` (InfiniBand, one NIC per GPU). A CP group of at most
//! `gpus_per_node` ranks lies inside one node (the aligned topology places it so; in the
//! contiguous topology a group is priced as if it did, see docs/policies.md); a larger group
//! spans nodes, its ring has cross-node hops, and since every ring step waits for its slowest
//! hop, every step of such a ring runs at the inter-node rate.
struct network_spec {
  std::int32_t gpus_per_node = 8;
  link_tier intra_node{1.5e11, 1.5e-5};
  link_tier inter_node{4.0e10, 2.5e-5};

  //! True when a ring of `cp` ranks crosses nodes.
  [[nodiscard]] constexpr bool spans_nodes(std::int32_t cp) const noexcept {
    return cp > gpus_per_node;
  }
  //! The tier whose rate and latency a ring of `cp` ranks runs at.
  [[nodiscard]] constexpr const link_tier& tier(std::int32_t cp) const noexcept {
    return spans_nodes(cp) ? inter_node : intra_node;
  }

  //! Whether the numbers are usable: gpus_per_node >= 1, rates finite and positive, latencies
  //! finite and non-negative. The message names the field, the value and the limit.
  [[nodiscard]] status check() const {
    if (gpus_per_node < 1)
      return status::failure(status_code::invalid_option,
                             fmt::format("gpus_per_node = {} must be >= 1", gpus_per_node));
    for (const auto& [name, t] :
         {std::pair<const char*, const link_tier&>{"intra_node", intra_node},
          {"inter_node", inter_node}}) {
      if (!std::isfinite(t.bytes_per_second) || t.bytes_per_second <= 0)
        return status::failure(status_code::invalid_option,
                               fmt::format("{} bandwidth = {} bytes/s must be finite and > 0", name,
                                           t.bytes_per_second));
      if (!std::isfinite(t.latency) || t.latency < 0)
        return status::failure(
            status_code::invalid_option,
            fmt::format("{} latency = {} s must be finite and >= 0", name, t.latency));
    }
    return status::success();
  }
  friend bool operator==(const network_spec&, const network_spec&) = default;
};

} // namespace dcpp
