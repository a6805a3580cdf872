// Routes derived from a plan: for one micro-batch and one rank, which token ranges of which
// shard go where (zigzag chunks, padding to a multiple of 2*cp*padding_unit), and the THD layout
// of the rank's buffer. A pure function of (plan, where samples live): every rank derives the
// same routes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "dcpp/core/math.hpp"
#include "dcpp/core/zigzag.hpp"
#include "dcpp/error.hpp"
#include "dcpp/planner/plan.hpp"
#include "dcpp/route/fields.hpp"

namespace dcpp {

//! Where each sample of the global batch lives before routing: its origin rank and the token
//! offset of its first token in that rank's shard. Global sample ids number the samples rank by
//! rank, in shard order (the order of the length all-gather).
struct sample_origins {
  std::vector<std::int32_t> rank;
  std::vector<std::int64_t> offset;
  std::vector<std::int64_t> first_sample; //!< per rank: global id of its first sample (size N+1)

  //! From the per-rank sample counts and the global lengths.
  static sample_origins from_counts(std::span<const std::int64_t> samples_per_rank,
                                    std::span<const std::int64_t> lengths) {
    sample_origins o;
    o.first_sample.assign(1, 0);
    for (std::size_t r = 0; r < samples_per_rank.size(); ++r) {
      if (samples_per_rank[r] < 0)
        throw error(status_code::invalid_option,
                    fmt::format("samples_per_rank[{}] = {} is negative", r, samples_per_rank[r]));
      std::int64_t offset = 0;
      for (std::int64_t i = 0; i < samples_per_rank[r]; ++i) {
        const auto s = static_cast<std::size_t>(o.first_sample.back() + i);
        if (s >= lengths.size())
          throw error(status_code::invalid_option,
                      fmt::format("samples_per_rank sums past the {} samples of the batch",
                                  lengths.size()));
        o.rank.push_back(static_cast<std::int32_t>(r));
        o.offset.push_back(offset);
        offset += lengths[s];
      }
      o.first_sample.push_back(o.first_sample.back() + samples_per_rank[r]);
    }
    if (static_cast<std::size_t>(o.first_sample.back()) != lengths.size())
      throw error(status_code::invalid_option,
                  fmt::format("samples_per_rank sums to {}, the batch has {} samples",
                              o.first_sample.back(), lengths.size()));
    return o;
  }
};

//! A run of `count` consecutive tokens: from `source_offset` of the origin's shard to
//! `dest_offset` of the receiver's THD buffer.
struct route_segment {
  std::int64_t source_offset = 0;
  std::int64_t dest_offset = 0;
  std::int64_t count = 0;
  friend bool operator==(const route_segment&, const route_segment&) = default;
};

//! One rank's part of one micro-batch: what it sends to each rank (in the receiver's buffer
//! order), what it receives from each rank (same order as the sender lists it), and its layout.
//! Entries for the rank itself are local copies and never go through the network.
struct rank_route {
  std::int32_t rank = 0;
  std::vector<std::vector<route_segment>> send; //!< [receiver]
  std::vector<std::vector<route_segment>> recv; //!< [origin]
  thd_layout layout;

  [[nodiscard]] std::int64_t tokens_sent_remote() const noexcept { return sum(send, true); }
  [[nodiscard]] std::int64_t tokens_received_remote() const noexcept { return sum(recv, true); }
  [[nodiscard]] std::int64_t tokens_kept_local() const noexcept {
    std::int64_t t = 0;
    for (const auto& s : send[static_cast<std::size_t>(rank)])
      t += s.count;
    return t;
  }

private:
  std::int64_t sum(const std::vector<std::vector<route_segment>>& lists,
                   bool skip_self) const noexcept {
    std::int64_t t = 0;
    for (std::size_t r = 0; r < lists.size(); ++r)
      if (!skip_self || static_cast<std::int32_t>(r) != rank)
        for (const auto& s : lists[r])
          t += s.count;
    return t;
  }
};

//! The route of rank `me` in micro-batch `mb`. Samples of a group are laid out in the group's
//! order; each contributes `padded / cp` tokens to every member: chunk r then chunk 2cp-1-r.
inline rank_route make_rank_route(const plan& p, const sample_origins& origins, std::size_t mb,
                                  std::int32_t me, std::int64_t padding_unit = 1) {
  DCPP_EXPECTS(mb < p.microbatches.size() && me >= 0 && me < p.world_size && padding_unit >= 1);
  DCPP_EXPECTS(origins.rank.size() == p.lengths.size());
  const auto n = static_cast<std::size_t>(p.world_size);
  rank_route route;
  route.rank = me;
  route.send.resize(n);
  route.recv.resize(n);
  for (const plan_group& g : p.microbatches[mb].groups) {
    const bool mine = me >= g.first_rank && me < g.first_rank + g.cp;
    if (mine) {
      route.layout.first_rank = g.first_rank;
      route.layout.cp = g.cp;
      route.layout.rank_in_group = me - g.first_rank;
    }
    std::int64_t base = 0; // offset of the sample in every member's buffer
    for (const std::int32_t s : g.samples) {
      const auto si = static_cast<std::size_t>(s);
      const std::int64_t length = p.lengths[si];
      const std::int64_t padded = padded_length(length, g.cp, padding_unit);
      const std::int64_t chunk = zigzag_chunk_size(padded, g.cp);
      const std::int32_t origin = origins.rank[si];
      if (mine) {
        route.layout.samples.push_back(s);
        const std::int64_t real = route.layout.cu_seqlens.back() + length;
        const std::int64_t total = route.layout.cu_seqlens_padded.back() + padded;
        if (total > std::numeric_limits<std::int32_t>::max())
          throw error(status_code::invalid_plan,
                      fmt::format("micro-batch {}: group at rank {} holds {} padded tokens, more "
                                  "than int32 cu_seqlens can index ({})",
                                  mb, g.first_rank, total,
                                  std::numeric_limits<std::int32_t>::max()),
                      s);
        route.layout.cu_seqlens.push_back(static_cast<std::int32_t>(real));
        route.layout.cu_seqlens_padded.push_back(static_cast<std::int32_t>(total));
        const std::int64_t q = me - g.first_rank;
        for (int half = 0; half < 2; ++half) {
          const std::int64_t index = zigzag_chunk_index(g.cp, q, half);
          const std::int64_t count = zigzag_real_in_chunk(length, padded, g.cp, index);
          if (count > 0)
            route.recv[static_cast<std::size_t>(origin)].push_back(
                {origins.offset[si] + index * chunk, base + half * chunk, count});
        }
      }
      if (origin == me)
        for (std::int64_t q = 0; q < g.cp; ++q)
          for (int half = 0; half < 2; ++half) {
            const std::int64_t index = zigzag_chunk_index(g.cp, q, half);
            const std::int64_t count = zigzag_real_in_chunk(length, padded, g.cp, index);
            if (count > 0)
              route.send[static_cast<std::size_t>(g.first_rank + q)].push_back(
                  {origins.offset[si] + index * chunk, base + half * chunk, count});
          }
      base += padded / g.cp;
    }
  }
  return route;
}

//! Token volume of routing a whole plan, summed over ranks and micro-batches: tokens that cross
//! the network, tokens that stay on their origin rank, and all real tokens (what moving every
//! sample would send).
struct route_volume {
  std::int64_t tokens_remote = 0;
  std::int64_t tokens_local = 0;
  std::int64_t tokens_total = 0;
  friend bool operator==(const route_volume&, const route_volume&) = default;
};

//! Computes the volume directly from the plan (no routes built): O(samples * cp).
inline route_volume measure_route(const plan& p, const sample_origins& origins,
                                  std::int64_t padding_unit = 1) {
  route_volume v;
  for (const auto& mb : p.microbatches)
    for (const auto& g : mb.groups)
      for (const std::int32_t s : g.samples) {
        const auto si = static_cast<std::size_t>(s);
        const std::int64_t length = p.lengths[si];
        v.tokens_total += length;
        const std::int32_t origin = origins.rank[si];
        if (origin >= g.first_rank && origin < g.first_rank + g.cp) {
          const std::int64_t padded = padded_length(length, g.cp, padding_unit);
          const std::int64_t q = origin - g.first_rank;
          for (int half = 0; half < 2; ++half)
            v.tokens_local +=
                zigzag_real_in_chunk(length, padded, g.cp, zigzag_chunk_index(g.cp, q, half));
        }
      }
  v.tokens_remote = v.tokens_total - v.tokens_local;
  return v;
}

} // namespace dcpp
