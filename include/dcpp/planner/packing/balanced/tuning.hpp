// Every number the balanced portfolio runs on, in one place, each with the reason it has its
// value.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include <fmt/format.h>

#include "dcpp/error.hpp"
#include "dcpp/planner/options.hpp"

namespace dcpp {

//! The numbers of the `balanced` policy, each with its reason in a line; the measurements
//! behind them are in docs/benchmarks.md ("balanced: how the numbers were chosen"). "Size" is
//! samples x ranks of the batch: the limits switch off the costlier constructions on large
//! batches, where they pay least.
struct balanced_tuning {
  // ---- which constructions run where ---------------------------------------------------------
  //! The megatron and targeted constructions up to here: they cost O(samples x groups).
  std::int64_t megatron_limit = std::int64_t{1} << 15;
  //! The static construction up to here: one sort and a heap walk, cheaper than megatron.
  std::int64_t static_limit = std::int64_t{4} << 15;
  //! The tiled construction up to this many candidates (samples x rounds x groups per round).
  std::int64_t tiled_limit = std::int64_t{1} << 24;
  //! The levelled variants up to here: each costs a levelled run and a local search...
  std::int64_t levelled_variants_limit = std::int64_t{1} << 17;
  //! ...but the narrow one up to here: medium samples on a tight budget level best without
  //! the groups that grow their area, and it costs little there.
  std::int64_t narrow_variant_limit = std::int64_t{1} << 20;
  //! ...and the wide-raise one: where a medium sample's least group spans nodes on a slow
  //! network, only raises past `raise_area` bring it to the round's level.
  std::int64_t wide_raise_variant_limit = std::int64_t{1} << 20;
  //! The second list of steps (`balanced_step::second`). The chunked and bisected constructions
  //! pack their other samples without it, and so does the contiguous topology's aligned run: a
  //! faster inner packing can make the outer plan slower after the passes, and the second list
  //! must never make a plan slower.
  bool second_list = true;
  //! Its levelled steps only where the best plan so far is more than this share above the lower
  //! bound: they exist for batches far from it (medium samples on a tight budget, slow
  //! networks), and near it they cost most of the planning time for rarely a faster plan.
  double second_list_gap = 0.02;
  //! Up to here no step's gap (`balanced_step::gap`) gates it: every step is cheap there.
  std::int64_t ungated_limit = std::int64_t{1} << 14;
  //! The sized construction up to here: a levelled run from its own sizes and a local search...
  std::int64_t sized_limit = std::int64_t{1} << 21;
  //! ...the search only where its rounds are within this factor of the best plan so far: the
  //! search is most of its cost, and from further behind it has not caught up.
  double sized_within = 1.03;
  //! The tied constructions up to here (`balanced_construction::tied`), where the best plan so
  //! far is not within `second_list_gap` of the lower bound...
  std::int64_t tied_limit = std::int64_t{1} << 21;
  //! ...but the first two (one raise, exact and loose) run near the bound too, up to here on
  //! every batch and past it only within `second_list_gap` of the bound: near it, where short
  //! samples tie in area everywhere, their groups of 2 level the rounds closer to it; far from
  //! it on the largest batches their levelled runs and searches cost as much as the rest of the
  //! portfolio for rarely a faster plan.
  std::int64_t tied_near_limit = std::int64_t{1} << 24;
  //! ...a larger size ties with a sample's size where its rank area is at most this factor of
  //! it (the ring's exchange hidden behind compute: the area is the same).
  double tie_area = 1.0 + 1e-9;
  //! ...and for the last two tied steps, within this one: where a cost prices the ring's
  //! exchange as not quite hidden, or a fit's noise parts sizes that tie, they tie no more.
  double loose_tie_area = 1.02;
  //! ...and where the exact ties raise no sample (a ring never wholly hidden: every larger size
  //! costs some area), a step within this one as well, one raise, near the bound too as the
  //! first two, on batches that are not dense: the loose step also raises the short samples,
  //! whose larger groups cost more area than they level the rounds; this one the long ones
  //! alone, as the exact step does where the ring hides.
  double close_tie_area = 1.005;
  //! ...those loose steps searched on dense batches (`dense`) only where their rounds are within
  //! this factor of the best plan so far (where a step runs ahead: the best at its start): from
  //! further behind their search is the portfolio's longest there and has not caught up.
  double loose_tied_within = 1.02;
  //! The chunked construction below here: a whole packing per class, its plan rarely wins there.
  std::int64_t chunked_limit = (std::int64_t{1} << 18) - 1;
  //! ... and only where the best plan so far is more than this share above the lower bound.
  double chunked_gap = 0.02;
  //! The bisected construction up to here, where at most this many samples need CP...
  std::int64_t bisected_limit = std::int64_t{1} << 22;
  std::int32_t bisected_samples = 64;
  //! ... and at most this many per round: a round's layout tries 2^(n-1) splits.
  double bisected_round_samples = 10;
  //! Every split of a round's samples up to this many samples (at most 20), greedy past it.
  std::int32_t bisected_exhaustive = 12;
  //! The most even splits whose halves are laid out in turn, the fastest kept.
  std::int32_t bisected_splits = 4;
  //! Round counts tried: up to this many micro-batch multiples past the fewest...
  std::int32_t bisected_extra_rounds = 3;
  //! ... that hold the samples' tokens at this share of the world's.
  double bisected_fill = 0.97;
  //! Moves or swaps of the rounds' search, the best one each time.
  std::int32_t bisected_steps = 64;
  //! Tries per deal and round count, and layouts in all: a layout costs microseconds.
  std::int64_t bisected_trials = 4096;
  std::int64_t bisected_layouts = 40000;
  //! Splits weighed per sample and rank of the batch: the search's cost follows the batch's size.
  double bisected_work = 32;
  //! The rounds also with ranks left free for the other samples, at one round count.
  bool bisected_reserve = true;

  // ---- the levelled construction ---------------------------------------------------------------
  //! A larger group where it costs at most this factor of the sample's rank area (first run).
  double reach_area = 1.05;
  double narrow_reach_area = 1.0; //!< first variant: only where the area does not grow
  double wide_reach_area = 1.10;  //!< second variant: where a batch needs wide groups filled
  //! A sample above its round's level spreads where its area grows at most this factor.
  double raise_area = 1.02;
  //! Fourth variant: raises up to this factor, for long samples that must span nodes.
  double wide_raise_area = 1.25;
  //! Dense batches' levelled runs, and a wide-raise variant beside the one above: raises up to
  //! this factor. On a slow network a long sample's larger group costs much more area yet still
  //! lowers its time; twice the area lets it take the next doubling of its group wherever that
  //! lowers its time at all.
  double far_raise_area = 2.0;
  //! The first levelled run lets samples ride in a larger group's slack; below the variants'
  //! limit the same run without rides competes too (rides lose on some smaller batches).
  bool free_ride = true;
  //! On dense batches (`dense`) the first levelled run also runs without rides: after the
  //! local search that plan wins there on some clusters (a fast network, a larger model), while
  //! before it the run with rides is ahead on all, so both run.
  bool dense_without_rides = true;
  //! That run without rides is built and searched on a second thread while the run with rides
  //! runs, and so is each tied step's twin (the same plans; only with a full cost table).
  bool parallel_levelled = true;
  //! With it, past here (samples x ranks) the passes from the first list's best, where the
  //! second list's plan won, run on that thread beside the passes from the second's: below,
  //! they end sooner than the thread starts and joins (4,096 SFT samples on 64 ranks).
  std::int64_t passes_beside_above = std::int64_t{1} << 22;
  //! A ride costs the rider at most this factor of its area (a wide ring's latency).
  double ride_area = 2.0;
  //! Third variant: a sample above this share of its round's level joins no group (0: none).
  double heavy_share = 0.4;
  //! Rounds raised to the micro-batch multiple are halved inside their groups where these hold
  //! this many samples each on average (every rank keeps working), else split by groups.
  double halve_samples_per_group = 4;
  //! A round ends early only after this many misses in a row (a full scan is cheap before)...
  std::int32_t early_end_misses = 256;
  //! ...that are at least 1/this of the samples left, and is checked again after 1/this more.
  std::int32_t early_end_fraction = 8;
  //! A full round is looked for every this many misses: each check costs more than a miss.
  std::int32_t full_round_check_every = 16;

  // ---- the targeted construction and placement --------------------------------------------
  //! Groups examined per CP size when placing a sample: room past the first full ones, O(log).
  std::int32_t candidates_per_size = 8;
  //! Passes raising CP sizes toward the per-rank target: the target settles within three.
  std::int32_t raise_passes = 3;

  // ---- portfolio -------------------------------------------------------------------------------
  //! With `extra_microbatches = -1`, up to 1/this more rounds than the token minimum: a sample
  //! that spans nodes is best alone in its round, and every round pays its overhead.
  std::int32_t extra_rounds_divisor = 1;
  //! The search again with a multiple of empty rounds added, while it pays, up to the limit:
  //! no construction takes a round only to shed a dominant sample's small companions.
  std::int32_t spill_passes = 1;
  std::int64_t spill_limit = std::int64_t{1} << 17;
  //! Sweeps of the tile exchange over the tile sizes while one pays (0: none).
  std::int32_t tile_exchange_sweeps = 1;
  //! A construction this factor slower than the best so far is not improved: the search does
  //! not close such a gap, and it is the costly part.
  double improve_within = 1.25;
  //! ... but the megatron plan within this factor is: from that start the search does.
  double megatron_improve_within = 2;
  //! Past the megatron limit the megatron plan competes, as it is, with at most this many
  //! samples per rank: there groups must take the ranks samples leave (0: never)...
  double megatron_samples_per_rank = 16;
  //! ...in the aligned topology with at most this many: its blocks leave no ranks between
  //! groups, and at 16 per rank the plan no longer won and cost most of the planning time.
  double aligned_megatron_samples_per_rank = 4;
  //! The samples per rank up to which the megatron plan competes in topology `t`.
  [[nodiscard]] double megatron_share(topology t) const noexcept {
    return t == topology::aligned ? aligned_megatron_samples_per_rank : megatron_samples_per_rank;
  }
  //! Past `wide_raise_above`, with at most this many samples per rank, the one levelled run
  //! there raises up to `far_raise_area`: too few short samples are left to level the rounds,
  //! so the long ones must spread instead (0: never). Below, the sized construction does that.
  double wide_raise_samples_per_rank = 16;
  std::int64_t wide_raise_above = std::int64_t{1} << 22;
  //! Whether `samples` on `world` ranks are a dense batch: past `wide_raise_above` (samples x
  //! ranks) with at most `wide_raise_samples_per_rank` per rank.
  [[nodiscard]] bool dense(std::int64_t samples, std::int32_t world) const noexcept {
    return samples * world > wide_raise_above &&
           static_cast<double>(samples) <= wide_raise_samples_per_rank * world;
  }
  //! Contiguous worlds: the portfolio also on the aligned sizes alone (the contiguous ladders
  //! cut the world into ranges that pack worse), where the best is past `aligned_gap`.
  bool aligned_in_contiguous = true;
  double aligned_gap = 5e-3;
  //! A plan within this fraction of the lower bound ends the portfolio (rounding noise)...
  double bound_reached = 1e-9;
  //! ...and past `levelled_variants_limit`, within this one: not worth a levelled run there.
  double bound_reached_large = 5e-3;
  //! A larger CP size counts as less area only below this factor: noise must not pick it.
  double area_noise = 1.0 - 1e-9;

  // ---- the local search ----------------------------------------------------------------------
  //! Sweeps over the rounds: the search converges long before.
  std::int32_t improvement_sweeps = 16;
  //! Moves per round and sweep, in multiples of the world size (every rank's group once).
  std::int32_t moves_per_rank = 4;
  //! Groups examined per CP size for a move or a swap: wide on small batches (better moves),
  //! narrow from `wide_search_limit` on (where each examined group costs most).
  std::int32_t wide_candidates = 64;
  std::int32_t narrow_candidates = 8;
  std::int64_t wide_search_limit = std::int64_t{1} << 18;
  //! The best plan searched once more with this factor of candidates, below
  //! `wide_search_limit` and from `final_search_from` on: once, on one plan, it is affordable.
  std::int32_t final_candidates_factor = 4;
  std::int64_t final_search_from = std::int64_t{1} << 22;
  //! Swaps: samples of other groups examined per critical sample and size (groups of many tiny
  //! samples made the search quadratic in them).
  std::int64_t swap_samples = 1024;
  //! Swaps at the critical group's own size: groups walked per sample (at least the search's
  //! candidates). Such a swap gains in full only where the returning sample is lighter by at
  //! least the critical group's lead and the other group has the headroom for the difference:
  //! on balanced rounds those groups lie deep in the headroom order.
  std::int64_t swap_groups = 64;
  //! The headroom index is a heap from this many groups on, else per-round sets merged as they
  //! are walked (the same order). The sets are filed again only where a group's load changes,
  //! the heap also where its round's maximum moves, and the merge is not slower on any batch
  //! measured: the heap is the sets' independent reference (the search's tests compare them).
  std::int64_t heap_index_groups = std::numeric_limits<std::int64_t>::max();
  //! A move must gain more than this fraction of the step time: no chasing rounding noise.
  double gain_epsilon = 1e-12;

  //! Whether every member is usable: counts and divisors within their ranges, factors finite
  //! and in range (a zero divisor or a NaN factor would divide by zero or compare false
  //! everywhere). The message names the member, its value and the limit.
  [[nodiscard]] status check() const {
    const auto at_least = [](std::string_view name, std::int64_t value, std::int64_t least) {
      return value >= least ? status::success()
                            : status::failure(status_code::invalid_option,
                                              fmt::format("balanced tuning: {} = {} is below {}",
                                                          name, value, least));
    };
    const auto within = [](std::string_view name, double value, double lo, double hi) {
      return std::isfinite(value) && value >= lo && value <= hi
                 ? status::success()
                 : status::failure(status_code::invalid_option,
                                   fmt::format("balanced tuning: {} = {} is not a finite number "
                                               "in [{}, {}]",
                                               name, value, lo, hi));
    };
    constexpr double big = 1e300;
    for (const status& s : {
             at_least("early_end_misses", early_end_misses, 0),
             at_least("early_end_fraction", early_end_fraction, 1),
             at_least("full_round_check_every", full_round_check_every, 1),
             at_least("candidates_per_size", candidates_per_size, 1),
             at_least("raise_passes", raise_passes, 0),
             at_least("extra_rounds_divisor", extra_rounds_divisor, 1),
             at_least("spill_passes", spill_passes, 0),
             at_least("tile_exchange_sweeps", tile_exchange_sweeps, 0),
             at_least("improvement_sweeps", improvement_sweeps, 0),
             at_least("tiled_limit", tiled_limit, 0),
             at_least("final_search_from", final_search_from, 0),
             at_least("moves_per_rank", moves_per_rank, 0),
             at_least("wide_candidates", wide_candidates, 1),
             at_least("narrow_candidates", narrow_candidates, 1),
             at_least("swap_samples", swap_samples, 1),
             at_least("swap_groups", swap_groups, 1),
             at_least("heap_index_groups", heap_index_groups, 0),
             at_least("final_candidates_factor", final_candidates_factor, 1),
             at_least("bisected_limit", bisected_limit, 0),
             at_least("bisected_samples", bisected_samples, 0),
             at_least("bisected_exhaustive", bisected_exhaustive, 0),
             at_least("bisected_splits", bisected_splits, 1),
             at_least("bisected_extra_rounds", bisected_extra_rounds, 0),
             at_least("bisected_steps", bisected_steps, 0),
             at_least("bisected_trials", bisected_trials, 0),
             at_least("bisected_layouts", bisected_layouts, 0),
             within("bisected_work", bisected_work, 0, big),
             within("reach_area", reach_area, 0, big),
             within("narrow_reach_area", narrow_reach_area, 0, big),
             within("wide_reach_area", wide_reach_area, 0, big),
             within("raise_area", raise_area, 0, big),
             within("wide_raise_area", wide_raise_area, 0, big),
             within("far_raise_area", far_raise_area, 0, big),
             within("ride_area", ride_area, 0, big),
             within("heavy_share", heavy_share, 0, big),
             within("halve_samples_per_group", halve_samples_per_group, 0, big),
             within("improve_within", improve_within, 1, big),
             within("sized_within", sized_within, 1, big),
             within("tie_area", tie_area, 1, big),
             within("loose_tie_area", loose_tie_area, 1, big),
             within("close_tie_area", close_tie_area, 1, big),
             within("loose_tied_within", loose_tied_within, 1, big),
             within("megatron_improve_within", megatron_improve_within, 1, big),
             within("megatron_samples_per_rank", megatron_samples_per_rank, 0, big),
             within("aligned_megatron_samples_per_rank", aligned_megatron_samples_per_rank, 0, big),
             within("wide_raise_samples_per_rank", wide_raise_samples_per_rank, 0, big),
             within("aligned_gap", aligned_gap, 0, big),
             within("chunked_gap", chunked_gap, 0, big),
             within("second_list_gap", second_list_gap, 0, big),
             within("bisected_fill", bisected_fill, 0.01, 1),
             within("bisected_round_samples", bisected_round_samples, 0, big),
             within("area_noise", area_noise, 0.5, 1),
             within("gain_epsilon", gain_epsilon, 0, 1),
             within("bound_reached", bound_reached, 0, 1),
             within("bound_reached_large", bound_reached_large, 0, 1),
         })
      if (!s)
        return s;
    return status::success();
  }
};

} // namespace dcpp
