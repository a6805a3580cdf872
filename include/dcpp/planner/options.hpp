// Planner options, group topology and the per-sample facts every packing policy starts from.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/core/config.hpp"
#include "dcpp/core/math.hpp"
#include "dcpp/error.hpp"

namespace dcpp {

//! Which rank ranges may form a CP group.
enum class topology : std::uint8_t {
  //! `cp` a power of two, `first_rank % cp == 0`, `first_rank + cp <= world_size` (NCCL-friendly:
  //! the aligned groups nest like a binary tree, so the communicators can be created up front).
  aligned,
  //! any `cp` in [min_cp, max_cp], any `first_rank` with `first_rank + cp <= world_size`.
  contiguous,
  //! The groups Megatron-LM creates for dynamic CP, and what its consumers need of a plan:
  //! aligned power-of-two groups smaller than the largest power of two P <= world_size, plus
  //! the one group of all ranks (on 24 ranks: 1, 2, 4, 8 and 24; on 32: 1 to 32). Every rank
  //! runs a sample in every micro-batch (the planner fills idle ranks, `occupy.hpp`).
  megatron,
};

constexpr std::string_view to_string(topology t) noexcept {
  switch (t) {
  case topology::aligned: return "aligned";
  case topology::contiguous: return "contiguous";
  case topology::megatron: return "megatron";
  }
  return "aligned";
}

//! The topology a name gives (`to_string`'s inverse); nullopt for any other name.
constexpr std::optional<topology> topology_from_string(std::string_view name) noexcept {
  for (const topology t : {topology::aligned, topology::contiguous, topology::megatron})
    if (to_string(t) == name)
      return t;
  return std::nullopt;
}

//! The topology names, for help texts and errors.
inline constexpr std::string_view topology_names = "aligned, contiguous or megatron";

//! True when a group of `cp` ranks starts at a multiple of `cp` (the aligned and megatron
//! topologies, whose sizes are powers of two but for megatron's group of all ranks, at 0).
constexpr bool aligned_offsets(topology t) noexcept {
  return t != topology::contiguous;
}

//! Everything the planner needs besides the lengths. Plain data: copy, compare, print.
struct plan_options {
  std::int32_t world_size = 8;             //!< N: ranks of the dynamic mesh (DP x CP)
  std::int64_t max_tokens_per_rank = 4096; //!< M: token budget per rank and micro-batch
  std::int32_t min_cp = 1;                 //!< smallest CP group size
  std::int32_t max_cp = 0;                 //!< largest CP group size; 0 means world_size
  topology group_topology = topology::aligned;
  std::int64_t padding_unit = 1;        //!< samples pad to a multiple of 2*cp*padding_unit
  std::int32_t microbatch_multiple = 1; //!< micro-batch count must be a multiple of this
  //! The price of one micro-batch in the estimator's unit (seconds for the transformer model):
  //! plans pay it once per micro-batch, so an extra micro-batch is taken only when it saves
  //! more. Empty: the estimator's own, else `default_microbatch_overhead_share` of the batch's
  //! mean micro-batch at the bound (costs.hpp).
  std::optional<double> microbatch_overhead;

  [[nodiscard]] std::int32_t effective_max_cp() const noexcept {
    return max_cp == 0 ? world_size : std::min(max_cp, world_size);
  }
  friend bool operator==(const plan_options&, const plan_options&) = default;
};

//! True when a group of `cp` ranks starting at `first_rank` is legal under `options`.
inline bool is_legal_group(const plan_options& options, std::int32_t first_rank, std::int32_t cp) {
  if (cp < options.min_cp || cp > options.effective_max_cp())
    return false;
  if (first_rank < 0 || std::int64_t{first_rank} + cp > options.world_size)
    return false;
  switch (options.group_topology) {
  case topology::aligned: return is_power_of_two(cp) && first_rank % cp == 0;
  case topology::megatron:
    if (cp == options.world_size)
      return first_rank == 0;
    return is_power_of_two(cp) &&
           std::cmp_less(cp, std::bit_floor(static_cast<std::uint32_t>(options.world_size))) &&
           first_rank % cp == 0;
  case topology::contiguous: return true;
  }
  return false;
}

//! The CP sizes a group may have, ascending.
inline std::vector<std::int32_t> legal_cp_sizes(const plan_options& options) {
  std::vector<std::int32_t> sizes;
  const std::int64_t hi = options.effective_max_cp();
  for (std::int64_t cp = std::max(1, options.min_cp); cp <= hi; ++cp) { // 64 bits: hi may be 2^31-1
    const auto c = static_cast<std::int32_t>(cp);
    if (options.group_topology == topology::contiguous ||
        (is_power_of_two(c) && is_legal_group(options, 0, c)) ||
        (c == options.world_size && is_legal_group(options, 0, c)))
      sizes.push_back(c);
  }
  return sizes;
}

//! Tokens a sample of `length` puts on each rank of a group of `cp` (padding included).
inline std::int64_t tokens_per_rank(const plan_options& options, std::int64_t length,
                                    std::int32_t cp) {
  DCPP_EXPECTS(length >= 0 && cp >= 1 && options.padding_unit >= 1);
  // padded_length(length, cp, unit) / cp = ceil(length / (2 cp unit)) * 2 unit: one division,
  // a shift when 2 cp unit is a power of two (the planner's hot paths call this per candidate)
  const std::int64_t chunk = 2 * std::int64_t{cp} * options.padding_unit;
  const std::int64_t chunks =
      is_power_of_two(chunk)
          ? (length + chunk - 1) >> std::countr_zero(static_cast<std::uint64_t>(chunk))
          : ceil_div(length, chunk);
  return chunks * 2 * options.padding_unit;
}

//! Limits on the options that keep every token count the planner forms (tokens per rank x
//! ranks, padding chunks, a batch's total) inside 64 bits, far above any cluster: without them a
//! budget near 2^62 wrapped a product to 0 and divided by it, and a world of 2^31 - 1 ranks
//! looped forever.
inline constexpr std::int32_t max_world_size = std::int32_t{1} << 24;            // 16,777,216 ranks
inline constexpr std::int64_t max_tokens_per_rank_limit = std::int64_t{1} << 36; // 6.9e10
inline constexpr std::int64_t max_padding_unit = std::int64_t{1} << 20;
//! The most tokens a batch may hold in all.
inline constexpr std::int64_t max_batch_tokens = std::int64_t{1} << 62;
//! The most samples a batch may hold: planning time and memory grow with the count (seconds and
//! gigabytes at this limit: docs/benchmarks.md), and `read_batch`
//! refuses the sample past it. What stops an endless stream (`yes 5 | dcpp-plan -`) before it
//! fills the memory is `batch_input_limit` (io/batch_input.hpp): 64 bytes per sample at this
//! limit, read before the text is parsed.
inline constexpr std::int64_t max_batch_samples = std::int64_t{1} << 24; // 16,777,216
//! The largest micro-batch count multiple (virtual pipeline stages use a few to a few dozen): a
//! plan has at least that many micro-batches, and planning time grows with their square.
inline constexpr std::int32_t max_microbatch_multiple = 1024;

//! Checks the options alone (no lengths). Cheap; names the field, the value and the limit.
inline status check_options(const plan_options& o) noexcept {
  using enum status_code;
  if (o.world_size < 1)
    return status::failure(invalid_option,
                           fmt::format("world_size = {} must be >= 1", o.world_size));
  if (o.world_size > max_world_size)
    return status::failure(invalid_option, fmt::format("world_size = {} exceeds the limit {}",
                                                       o.world_size, max_world_size));
  if (o.padding_unit < 1)
    return status::failure(invalid_option,
                           fmt::format("padding_unit = {} must be >= 1", o.padding_unit));
  if (o.padding_unit > max_padding_unit)
    return status::failure(invalid_option, fmt::format("padding_unit = {} exceeds the limit {}",
                                                       o.padding_unit, max_padding_unit));
  if (o.max_tokens_per_rank > max_tokens_per_rank_limit)
    return status::failure(invalid_option,
                           fmt::format("max_tokens_per_rank = {} exceeds the limit {}",
                                       o.max_tokens_per_rank, max_tokens_per_rank_limit));
  if (o.max_tokens_per_rank < 2 * o.padding_unit)
    return status::failure(
        budget_below_padding,
        fmt::format("max_tokens_per_rank = {} is below the padding unit 2*padding_unit = {}",
                    o.max_tokens_per_rank, 2 * o.padding_unit));
  if (o.min_cp < 1)
    return status::failure(invalid_option, fmt::format("min_cp = {} must be >= 1", o.min_cp));
  if (o.max_cp < 0)
    return status::failure(invalid_option,
                           fmt::format("max_cp = {} must be >= 0 (0: world size)", o.max_cp));
  if (o.group_topology != topology::contiguous && o.max_cp != 0 && !is_power_of_two(o.max_cp) &&
      !(o.group_topology == topology::megatron && o.max_cp >= o.world_size))
    return status::failure(invalid_option,
                           fmt::format("max_cp = {} must be a power of two in the {} "
                                       "topology (use --topology contiguous)",
                                       o.max_cp, to_string(o.group_topology)));
  if (o.min_cp > o.effective_max_cp())
    return status::failure(invalid_option,
                           fmt::format("min_cp = {} exceeds max_cp = {} (world_size = {})",
                                       o.min_cp, o.effective_max_cp(), o.world_size));
  if (o.microbatch_multiple < 1)
    return status::failure(invalid_option, fmt::format("microbatch_multiple = {} must be >= 1",
                                                       o.microbatch_multiple));
  if (o.microbatch_multiple > max_microbatch_multiple)
    return status::failure(invalid_option,
                           fmt::format("microbatch_multiple = {} exceeds the limit {}",
                                       o.microbatch_multiple, max_microbatch_multiple));
  if (o.microbatch_overhead &&
      !(std::isfinite(*o.microbatch_overhead) && *o.microbatch_overhead >= 0))
    return status::failure(
        invalid_option,
        fmt::format("microbatch_overhead = {} must be finite and >= 0", *o.microbatch_overhead));
  if (o.group_topology == topology::megatron) {
    // Megatron-LM makes its groups of min_cp ranks and more: with the largest power of two
    // P <= world_size, those below P, and the group of all ranks (which keeps every rank busy
    // where the others cannot tile the world)
    const auto largest = std::bit_floor(static_cast<std::uint32_t>(o.world_size));
    if (!is_power_of_two(o.min_cp) && o.min_cp != o.world_size)
      return status::failure(invalid_option,
                             fmt::format("min_cp = {} must be a power of two or world_size = {} "
                                         "in the megatron topology",
                                         o.min_cp, o.world_size));
    // groups of min_cp that do not tile the world leave ranks only the group of all can use
    if (o.world_size % o.min_cp != 0 && o.effective_max_cp() < o.world_size)
      return status::failure(world_not_divisible,
                             fmt::format("world_size = {} is not a multiple of min_cp = {} and "
                                         "max_cp = {} leaves out the group of all ranks: ranks "
                                         "would be left without a group",
                                         o.world_size, o.min_cp, o.effective_max_cp()));
    if (!std::cmp_less(o.min_cp, largest) && o.effective_max_cp() < o.world_size)
      return status::failure(invalid_option,
                             fmt::format("no CP group size is legal in the megatron topology with "
                                         "min_cp = {}, max_cp = {} and world_size = {} (sizes: "
                                         "powers of two below {}, and {})",
                                         o.min_cp, o.effective_max_cp(), o.world_size, largest,
                                         o.world_size));
    return status::success();
  }
  if (o.group_topology == topology::aligned) {
    if (!is_power_of_two(o.min_cp))
      return status::failure(invalid_option,
                             fmt::format("min_cp = {} must be a power of two in the aligned "
                                         "topology (use --topology contiguous)",
                                         o.min_cp));
    if (o.world_size % o.min_cp != 0)
      return status::failure(world_not_divisible,
                             fmt::format("world_size = {} is not a multiple of min_cp = {}: the "
                                         "aligned topology tiles the world with groups of min_cp",
                                         o.world_size, o.min_cp));
  } else if (o.world_size % o.min_cp != 0) {
    return status::failure(world_not_divisible,
                           fmt::format("world_size = {} is not a multiple of min_cp = {}: ranks "
                                       "would be left without a group",
                                       o.world_size, o.min_cp));
  }
  return status::success();
}

//! A planning problem: lengths, options and, per sample, the smallest legal CP size on which it
//! fits the budget. Built by `make_problem`, which checks everything first.
struct problem {
  plan_options options;
  std::vector<std::int64_t> lengths;
  std::vector<std::int32_t> min_cp_of; //!< per sample: smallest legal cp that fits
  std::vector<std::int32_t> cp_sizes;  //!< legal cp sizes, ascending
  //! `size_index_of_cp[cp]`: the index of a legal size in `cp_sizes`, -1 for other sizes up to the
  //! largest legal one.
  std::vector<std::int32_t> size_index_of_cp;
  //! Optional rows and table of the estimator's costs, filled by `tabulate_costs`
  //! (dcpp/planner/costs.hpp): samples of one length share a row, `cost_row[s]`, numbered by
  //! first occurrence (`row_sample[r]` is the first sample of row r); when the table is not too
  //! large, `costs[row * cp_sizes.size() + size_index]` for every legal size at or above the
  //! length's smallest. Read through `sample_cost`, which calls the estimator when `costs` is
  //! empty; the values are the estimator's own (same bits).
  std::vector<double> costs;
  std::vector<std::int32_t> cost_row;
  std::vector<std::int32_t> row_sample;
  //! The micro-batch overhead when it comes from the batch's own work (no option, no
  //! estimator overhead), worked out once by `tabulate_costs`; NaN until then.
  double default_overhead = std::numeric_limits<double>::quiet_NaN();
  //! The two terms of the least work per rank (`least_work_of` in costs.hpp: least areas over
  //! the world, longest least time), worked out once by `tabulate_costs` for its estimator (the
  //! planner, the lower bound and the evaluation read it); NaN until then.
  double least_area_per_rank = std::numeric_limits<double>::quiet_NaN();
  double least_longest = std::numeric_limits<double>::quiet_NaN();
  //! Every sample's least rank-tokens (tokens per rank x ranks, padding included) over its legal
  //! sizes, summed (`least_padded_tokens`): what `min_microbatches` divides by the world's
  //! capacity. Filled by `make_problem`; -1 until then.
  std::int64_t least_rank_tokens = -1;

  [[nodiscard]] std::size_t size() const noexcept { return lengths.size(); }
  //! Row `row` of `costs` (indexed by size index), or nullptr without a table.
  [[nodiscard]] const double* cost_row_at(std::size_t row) const noexcept {
    return costs.empty() ? nullptr : costs.data() + row * cp_sizes.size();
  }
  //! The row of `costs` for `sample`'s length, or nullptr without a table.
  [[nodiscard]] const double* cost_row_of(std::size_t sample) const noexcept {
    return costs.empty() ? nullptr : cost_row_at(static_cast<std::size_t>(cost_row[sample]));
  }
  [[nodiscard]] std::int64_t rank_tokens(std::size_t sample, std::int32_t cp) const {
    return tokens_per_rank(options, lengths[sample], cp);
  }
};

//! Work `make_problem` may spend trying larger contiguous sizes for `least_padded_tokens`, in
//! sizes tried over the batch's distinct lengths; past it a length takes the least padded
//! length on one rank (a lower value, still a bound).
inline constexpr std::int64_t least_padding_work = std::int64_t{1} << 24;

//! The least rank-tokens (tokens per rank x ranks, padding included) a sample of `length` takes
//! on a legal size (`sizes`, ascending) from `smallest` on. Aligned sizes double, and a size's
//! padded length is then a multiple of the one before's, so the smallest legal size pads least.
//! A larger contiguous size can pad less (273 tokens: 280 on 5 ranks, 276 on 6), so those are
//! tried while they can: each padded length is a multiple of 2 x padding_unit of at least
//! `length`, and on cp ranks at least 2 cp padding_unit. `work` counts the sizes tried; where it
//! runs out the answer is the least such multiple, which no size goes below.
inline std::int64_t least_padded_tokens(const plan_options& o, std::span<const std::int32_t> sizes,
                                        std::int64_t length, std::int32_t smallest,
                                        std::int64_t& work) {
  const std::int64_t unit = 2 * o.padding_unit;
  const std::int64_t least_possible = ceil_div(length, unit) * unit;
  std::int64_t best = tokens_per_rank(o, length, smallest) * smallest;
  if (o.group_topology == topology::aligned || best == least_possible)
    return best; // (megatron: the group of all ranks need not be a multiple of the others)
  for (auto it = std::upper_bound(sizes.begin(), sizes.end(), smallest); it != sizes.end(); ++it) {
    if (unit * *it >= best)
      break; // every larger size pads to at least this
    if (work-- <= 0)
      return least_possible;
    best = std::min(best, tokens_per_rank(o, length, *it) * *it);
    if (best == least_possible)
      break;
  }
  return best;
}

//! Every sample's least rank-tokens over its legal sizes, summed (`problem::least_rank_tokens`,
//! which `make_problem` fills with it): at the smallest size, but for contiguous samples of at
//! least 2 ranks, where a larger size can pad less (each distinct length tried once); a sample
//! of one rank is padded to the least multiple of 2 x padding_unit already.
inline std::int64_t least_rank_tokens_of(const problem& p) {
  const plan_options& o = p.options;
  std::int64_t total = 0;
  std::vector<std::pair<std::int64_t, std::int32_t>> wide; // (length, smallest size)
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (o.group_topology != topology::aligned && p.min_cp_of[i] > 1)
      wide.emplace_back(p.lengths[i], p.min_cp_of[i]);
    else
      total += p.rank_tokens(i, p.min_cp_of[i]) * p.min_cp_of[i];
  }
  std::sort(wide.begin(), wide.end());
  std::int64_t work = least_padding_work;
  for (std::size_t k = 0; k < wide.size();) {
    const auto [length, smallest] = wide[k];
    const std::int64_t least = least_padded_tokens(o, p.cp_sizes, length, smallest, work);
    for (; k < wide.size() && wide[k].first == length; ++k)
      total += least;
  }
  return total;
}

//! Largest sample length that fits on some legal group (the limit quoted in errors).
inline std::int64_t max_plannable_length(const plan_options& o) {
  const auto sizes = legal_cp_sizes(o);
  std::int64_t best = 0;
  for (const std::int32_t cp : sizes) {
    // largest L with padded(L)/cp <= M: padded is a multiple of 2*cp*unit
    const std::int64_t unit = 2 * std::int64_t{cp} * o.padding_unit;
    const std::int64_t padded = (o.max_tokens_per_rank * cp / unit) * unit;
    best = std::max(best, padded);
  }
  return best;
}

//! Checks options and lengths together: non-empty, every length positive and plannable.
inline status check_problem(const plan_options& o, std::span<const std::int64_t> lengths) noexcept {
  if (status s = check_options(o); !s)
    return s;
  if (lengths.empty())
    return status::failure(status_code::empty_batch, "the batch is empty: no sample to plan");
  if (std::cmp_greater(lengths.size(), max_batch_samples))
    return status::failure(status_code::invalid_length,
                           fmt::format("the batch holds {} samples; the limit is {}",
                                       lengths.size(), max_batch_samples));
  const std::int64_t limit = max_plannable_length(o);
  std::int64_t total = 0; // every length is at most `limit` < 2^61 here, so no sum wraps
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] <= 0)
      return status::failure(status_code::invalid_length,
                             fmt::format("sample {}: length = {} must be positive", i, lengths[i]),
                             static_cast<std::int64_t>(i));
    if (lengths[i] > limit)
      return status::failure(
          status_code::sample_too_long,
          fmt::format("sample {}: length = {} exceeds the largest plannable length {} "
                      "(largest group {} x max_tokens_per_rank = {}, {} topology, padding "
                      "included)",
                      i, lengths[i], limit, legal_cp_sizes(o).back(), o.max_tokens_per_rank,
                      to_string(o.group_topology)),
          static_cast<std::int64_t>(i));
    total += lengths[i];
    if (total > max_batch_tokens)
      return status::failure(status_code::invalid_length,
                             fmt::format("sample {}: the batch's tokens up to it ({}) exceed the "
                                         "limit {}",
                                         i, total, max_batch_tokens),
                             static_cast<std::int64_t>(i));
  }
  return status::success();
}

//! Builds the problem; throws dcpp::error if `check_problem` fails.
inline problem make_problem(const plan_options& o, std::span<const std::int64_t> lengths) {
  throw_if_failed(check_problem(o, lengths));
  problem p;
  p.options = o;
  p.lengths.assign(lengths.begin(), lengths.end());
  p.cp_sizes = legal_cp_sizes(o);
  p.size_index_of_cp.assign(
      p.cp_sizes.empty() ? 0 : static_cast<std::size_t>(p.cp_sizes.back()) + 1, -1);
  for (std::size_t l = 0; l < p.cp_sizes.size(); ++l)
    p.size_index_of_cp[static_cast<std::size_t>(p.cp_sizes[l])] = static_cast<std::int32_t>(l);
  p.min_cp_of.resize(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    for (const std::int32_t cp : p.cp_sizes) {
      if (tokens_per_rank(o, lengths[i], cp) <= o.max_tokens_per_rank) {
        p.min_cp_of[i] = cp;
        break;
      }
    }
  }
  p.least_rank_tokens = least_rank_tokens_of(p);
  return p;
}

} // namespace dcpp
