// The distributed data path: gather lengths, plan on every rank, check agreement, then move
// token payloads with one all-to-all-v per micro-batch into packed THD buffers, and per-token
// outputs back to their origin rank (the inverse route).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/core/zigzag.hpp"
#include "dcpp/error.hpp"
#include "dcpp/planner/plan.hpp"
#include "dcpp/planner/plan_hash.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/route/agreement.hpp"
#include "dcpp/route/fields.hpp"
#include "dcpp/route/locality.hpp"
#include "dcpp/route/route.hpp"

namespace dcpp {

//! Moves one step's payloads along the routes of a plan, on a host-memory communicator.
//! Construction is collective: it proves that every rank holds the same plan and origins.
template <communicator C, payload_field... Fields>
requires(C::buffer_memory == memory_space::host) class router {
public:
  using batch_type = thd_batch<Fields...>;
  using shard_type = token_shard<Fields...>;
  //! Bytes of one token across all routed fields.
  static constexpr std::size_t token_bytes = (sizeof(typename Fields::value_type) + ... + 0);

  router(C comm, plan p, sample_origins origins, std::int64_t padding_unit = 1)
      : comm_(std::move(comm)), plan_(std::move(p)), origins_(std::move(origins)),
        padding_unit_(padding_unit) {
    routes_ = detail::agreed_routes(comm_, plan_, origins_, padding_unit_);
  }

  [[nodiscard]] const plan& get_plan() const noexcept { return plan_; }
  [[nodiscard]] const sample_origins& origins() const noexcept { return origins_; }
  [[nodiscard]] std::size_t microbatches() const noexcept { return plan_.microbatches.size(); }
  [[nodiscard]] const rank_route& route(std::size_t mb) const { return routes_.at(mb); }
  [[nodiscard]] C& comm() noexcept { return comm_; }
  //! The communicator of this rank's CP group in micro-batch `mb` (created on first use and
  //! cached by the communicator; collective over the group's members). Throws when the rank is
  //! idle in that micro-batch.
  [[nodiscard]] C group(std::size_t mb) {
    const thd_layout& l = routes_.at(mb).layout;
    if (l.idle())
      throw error(
          status_code::invalid_plan,
          fmt::format("router::group: rank {} is idle in micro-batch {}", comm_.rank(), mb));
    return comm_.group_for(l.first_rank, l.cp);
  }
  //! Local samples' tokens (the shard size this rank must pass).
  [[nodiscard]] std::int64_t shard_tokens() const {
    return detail::shard_tokens_of(plan_, origins_, comm_.rank());
  }

  //! Builds this rank's THD buffer of micro-batch `mb` from every rank's shard (collective).
  //! A shard that does not match the plan (lengths, field sizes) fails on every rank at once.
  [[nodiscard]] thd_batch<Fields...> dispatch(std::size_t mb, const token_shard<Fields...>& shard) {
    return dispatch_only<Fields...>(mb, shard);
  }

  //! `dispatch` carrying only the fields `Named` (a pipeline stage's own: the first stage's
  //! token ids, the last one's labels and loss mask): the others stay empty in the batch and
  //! take no bytes in the all-to-all. Every rank names the same fields.
  template <payload_field... Named>
  [[nodiscard]] thd_batch<Fields...> dispatch_only(std::size_t mb,
                                                   const token_shard<Fields...>& shard) {
    static_assert(((detail::field_index<Named, Fields...> < sizeof...(Fields)) && ...),
                  "dispatch_only names a field the router does not carry");
    constexpr std::size_t named_bytes = (sizeof(typename Named::value_type) + ... + 0);
    throw_unless_agreed(comm_, check_shard<Named...>(shard));
    const rank_route& r = routes_.at(mb);
    const auto n = static_cast<std::size_t>(comm_.size());
    const auto me = static_cast<std::size_t>(comm_.rank());
    thd_batch<Fields...> out = layout_only(mb);
    const auto tokens = static_cast<std::size_t>(out.layout.tokens());
    (fill_named<Named>(out, tokens), ...);

    std::vector<std::int64_t> send_counts(n, 0), recv_counts(n, 0);
    for (std::size_t d = 0; d < n; ++d)
      if (d != me) {
        for (const auto& s : r.send[d])
          send_counts[d] += s.count * static_cast<std::int64_t>(named_bytes);
        for (const auto& s : r.recv[d])
          recv_counts[d] += s.count * static_cast<std::int64_t>(named_bytes);
      }
    std::vector<std::byte> send_buffer(total(send_counts)), recv_buffer(total(recv_counts));
    std::byte* cursor = send_buffer.data();
    for (std::size_t d = 0; d < n; ++d)
      if (d != me)
        for (const auto& s : r.send[d])
          ((cursor = pack_one(shard.template get<Named>(), s, cursor)), ...);
    comm_.all_to_all_v(
        std::span<const std::byte>(send_buffer), std::span<const std::int64_t>(send_counts),
        std::span<std::byte>(recv_buffer), std::span<const std::int64_t>(recv_counts));
    const std::byte* in = recv_buffer.data();
    for (std::size_t o = 0; o < n; ++o)
      if (o != me)
        for (const auto& s : r.recv[o])
          ((in = unpack_one(out.template get<Named>(), s, in)), ...);
    for (const auto& s : r.send[me]) // tokens already here: copied, never sent
      (copy_values(out.template get<Named>().data() + s.dest_offset,
                   shard.template get<Named>().data() + s.source_offset, s.count),
       ...);
    return out;
  }

  //! Micro-batch `mb`'s metadata alone, for a stage that carries no token data: the layout
  //! (`cu_seqlens`, the group), positions and real-token markers; every field empty. Local: no
  //! communication.
  [[nodiscard]] thd_batch<Fields...> layout_only(std::size_t mb) const {
    thd_batch<Fields...> out;
    out.layout = routes_.at(mb).layout;
    fill_geometry(out);
    return out;
  }

  //! The inverse route: per-token values of this rank's buffer of micro-batch `mb` (its
  //! `tokens()` values, padding included) go back to the origin ranks, which write them at their
  //! tokens' places in `shard_values` (`shard_tokens()` values). Padding values are dropped.
  template <transferable T>
  void combine(std::size_t mb, std::span<const T> buffer_values, std::span<T> shard_values) {
    const rank_route& r = routes_.at(mb);
    status local = status::success();
    if (static_cast<std::int64_t>(buffer_values.size()) != r.layout.tokens())
      local = status::failure(status_code::invalid_length,
                              fmt::format("combine: micro-batch {} buffer holds {} values, the "
                                          "layout has {} tokens",
                                          mb, buffer_values.size(), r.layout.tokens()));
    else if (static_cast<std::int64_t>(shard_values.size()) != shard_tokens())
      local = status::failure(status_code::invalid_length,
                              fmt::format("combine: shard output holds {} values, the local "
                                          "samples have {} tokens",
                                          shard_values.size(), shard_tokens()));
    throw_unless_agreed(comm_, local);
    const auto n = static_cast<std::size_t>(comm_.size());
    const auto me = static_cast<std::size_t>(comm_.rank());
    std::vector<std::int64_t> send_counts(n, 0), recv_counts(n, 0);
    for (std::size_t d = 0; d < n; ++d)
      if (d != me) {
        for (const auto& s : r.recv[d])
          send_counts[d] += s.count;
        for (const auto& s : r.send[d])
          recv_counts[d] += s.count;
      }
    std::vector<T> send_buffer(total(send_counts)), recv_buffer(total(recv_counts));
    std::size_t at = 0;
    for (std::size_t o = 0; o < n; ++o)
      if (o != me)
        for (const auto& s : r.recv[o]) {
          copy_values(send_buffer.data() + at, buffer_values.data() + s.dest_offset, s.count);
          at += static_cast<std::size_t>(s.count);
        }
    comm_.all_to_all_v(std::span<const T>(send_buffer), std::span<const std::int64_t>(send_counts),
                       std::span<T>(recv_buffer), std::span<const std::int64_t>(recv_counts));
    at = 0;
    for (std::size_t d = 0; d < n; ++d)
      if (d != me)
        for (const auto& s : r.send[d]) {
          copy_values(shard_values.data() + s.source_offset, recv_buffer.data() + at, s.count);
          at += static_cast<std::size_t>(s.count);
        }
    for (const auto& s : r.recv[me])
      copy_values(shard_values.data() + s.source_offset, buffer_values.data() + s.dest_offset,
                  s.count);
  }

private:
  template <class T>
  static void copy_values(T* dst, const T* src, std::int64_t count) {
    if (count > 0)
      std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(T));
  }
  static std::size_t total(const std::vector<std::int64_t>& counts) {
    return static_cast<std::size_t>(detail::total_count(counts));
  }

  //! The shard matches the plan: its lengths, and the fields `Named` sized to them (a stage's
  //! shard need not fill the fields it does not send).
  template <payload_field... Named>
  status check_shard(const token_shard<Fields...>& shard) const {
    if (status s = detail::check_shard_fields<Named...>(shard); !s)
      return s;
    const auto me = static_cast<std::size_t>(comm_.rank());
    const std::int64_t first = origins_.first_sample[me];
    const std::int64_t count = origins_.first_sample[me + 1] - first;
    if (static_cast<std::int64_t>(shard.lengths.size()) != count)
      return status::failure(status_code::invalid_length,
                             fmt::format("the shard holds {} samples, the plan gives this rank {}",
                                         shard.lengths.size(), count));
    for (std::int64_t i = 0; i < count; ++i)
      if (shard.lengths[static_cast<std::size_t>(i)] !=
          plan_.lengths[static_cast<std::size_t>(first + i)])
        return status::failure(status_code::invalid_length,
                               fmt::format("local sample {} has length {}, the plan has {} for "
                                           "sample {}",
                                           i, shard.lengths[static_cast<std::size_t>(i)],
                                           plan_.lengths[static_cast<std::size_t>(first + i)],
                                           first + i),
                               first + i);
    return status::success();
  }

  void fill_geometry(thd_batch<Fields...>& out) const {
    const thd_layout& l = out.layout;
    out.position_ids.resize(static_cast<std::size_t>(l.tokens()));
    out.is_real.resize(static_cast<std::size_t>(l.tokens()));
    for (std::size_t i = 0; i + 1 < l.cu_seqlens_padded.size(); ++i) {
      const std::int64_t padded = l.cu_seqlens_padded[i + 1] - l.cu_seqlens_padded[i];
      const std::int64_t length = l.cu_seqlens[i + 1] - l.cu_seqlens[i];
      const std::int64_t base = l.cu_seqlens_padded[i] / l.cp;
      for (std::int64_t j = 0; j < padded / l.cp; ++j) {
        const std::int64_t position = zigzag_position(padded, l.cp, l.rank_in_group, j);
        out.position_ids[static_cast<std::size_t>(base + j)] = position;
        out.is_real[static_cast<std::size_t>(base + j)] = position < length ? 1 : 0;
      }
    }
  }

  //! Field F sized to the buffer and filled with its padding value.
  template <class F>
  static void fill_named(thd_batch<Fields...>& out, std::size_t tokens) {
    auto& values = out.template get<F>();
    values.assign(tokens, static_cast<typename F::value_type>(F::padding));
  }

  // A segment travels field by field: [field 0 values][field 1 values]...
  template <class V>
  static std::byte* pack_one(const V& values, const route_segment& s, std::byte* cursor) {
    const std::size_t bytes = static_cast<std::size_t>(s.count) * sizeof(typename V::value_type);
    std::memcpy(cursor, values.data() + s.source_offset, bytes);
    return cursor + bytes;
  }
  template <class V>
  static const std::byte* unpack_one(V& values, const route_segment& s, const std::byte* cursor) {
    const std::size_t bytes = static_cast<std::size_t>(s.count) * sizeof(typename V::value_type);
    std::memcpy(values.data() + s.dest_offset, cursor, bytes);
    return cursor + bytes;
  }
  C comm_;
  plan plan_;
  sample_origins origins_;
  std::int64_t padding_unit_;
  std::vector<rank_route> routes_;
};

//! Whether `plan_step` re-places groups to keep tokens on their origin rank.
enum class placement : std::uint8_t { as_planned, locality_aware };

//! One step's planning, collectively: checks every rank's shard (fail together), all-gathers the
//! lengths and sample counts, plans on every rank, optionally re-places groups for locality,
//! proves every rank holds the same plan and returns the router for the step.
template <communicator C, payload_field... Fields, class Planner>
[[nodiscard]] router<C, Fields...> plan_step(Planner& planner, C comm,
                                             const token_shard<Fields...>& shard,
                                             placement where = placement::locality_aware) {
  throw_unless_agreed(comm, shard.check());
  check_same_options(comm, planner.options(), "plan_step");
  const std::vector<std::int64_t> lengths =
      comm.all_gather_v(std::span<const std::int64_t>(shard.lengths));
  const std::int64_t mine = static_cast<std::int64_t>(shard.lengths.size());
  const std::vector<std::int64_t> counts =
      comm.all_gather_v(std::span<const std::int64_t>(&mine, 1));
  plan p;
  status planned = status::success();
  try {
    p = planner.make_plan(lengths);
  } catch (const error& e) {
    planned = e.why();
  }
  throw_unless_agreed(comm, planned);
  sample_origins origins = sample_origins::from_counts(counts, lengths);
  const std::int64_t unit = planner.options().padding_unit;
  if (where == placement::locality_aware)
    place_for_locality(p, origins, unit);
  return router<C, Fields...>(std::move(comm), std::move(p), std::move(origins), unit);
}

} // namespace dcpp
