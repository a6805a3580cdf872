// Every number the balanced portfolio runs on, in one place, each with the reason it has its
// value. The measurements behind them are in docs/benchmarks.md ("balanced: how the numbers were
// chosen").
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include "dcpp/error.hpp"

namespace dcpp {

//! The numbers of the `balanced` policy. "Size" below is samples x ranks of the batch: the
//! limits switch off the costlier constructions on large batches, where they pay least.
struct balanced_tuning {
  // ---- which constructions run where ---------------------------------------------------------
  //! The megatron construction (and the targeted one, which needs its round count) up to here:
  //! it costs O(samples x groups).
  std::int64_t megatron_limit = std::int64_t{1} << 15;
  //! The static construction up to here (a factor of the megatron limit: it is one sort and a
  //! heap walk, cheaper than the megatron one).
  std::int64_t static_limit = std::int64_t{4} << 15;
  //! The tiled construction (a size that does not divide the world, the rest in smaller groups)
  //! up to this many candidates (samples x rounds x groups per round): it examines each.
  std::int64_t tiled_limit = std::int64_t{1} << 24;
  //! The levelled variants (0% and 10% reach, heavy samples apart) up to here: each costs a
  //! levelled run and a local search, 1.5-4.5x planning time where they run.
  std::int64_t levelled_variants_limit = std::int64_t{1} << 17;
  //! The chunked construction (each class's gap-term rounds, the rest packed again) up to here:
  //! per class of samples of one smallest size it costs a whole packing of the others and a
  //! local search, 3-8x planning time where it runs, so not from 4,096 samples on 64 ranks (2^18,
  //! the 1 ms target's size: there its classes alone took 0.3 ms, and its plan never won).
  std::int64_t chunked_limit = (std::int64_t{1} << 18) - 1;
  //! ... and only where the best plan so far is more than this share above the lower bound.
  double chunked_gap = 0.02;
  //! The bisected construction (the samples that need CP dealt to rounds, each round's ranks
  //! halved between them, the rest packed again) up to here, where the best plan so far is more
  //! than `chunked_gap` above the lower bound, and only where at most `bisected_samples` samples
  //! (64 at most) need CP...
  std::int64_t bisected_limit = std::int64_t{1} << 22;
  std::int32_t bisected_samples = 64;
  //! ... and at most this many of them per round at the fewest rounds: a round's layout tries
  //! 2^(n-1) splits of its n samples, and the rounds' search asks for thousands of layouts
  //! (long_tail/s1, 43 samples in 3 rounds on 64 ranks: 0.57 -> 1.9 s, for no better plan).
  double bisected_round_samples = 10;
  //! A round's samples are split between two halves by trying every split up to this many
  //! samples (at most 20), by a greedy split past it...
  std::int32_t bisected_exhaustive = 12;
  //! ...and the halves of this many of the most even splits that place both are laid out in
  //! turn, the fastest kept: on context_ext/256 (41 samples of 300K-1M tokens on 256 ranks) one
  //! such split per block reaches 0.967 of the budget-aware bound, four 0.98.
  std::int32_t bisected_splits = 4;
  //! Round counts tried: from the fewest that hold the samples' tokens at `bisected_fill` of
  //! the world's to this many micro-batch multiples more.
  std::int32_t bisected_extra_rounds = 3;
  double bisected_fill = 0.97;
  //! The rounds' search (of three deals each): at most this many moves or swaps of one sample
  //! between two rounds, the one that lowers their two times most each time...
  std::int32_t bisected_steps = 64;
  //! ... and at most this many tried, per deal and round count, and none once the construction
  //! has laid out this many sets of samples on blocks of ranks in all (each costs a few
  //! microseconds and is remembered: long_tail/48/s3 asks for 74,000 over four round counts,
  //! 0.23 s, context_ext/256 for 49,000, its best plan at the second count after 38,000)...
  std::int64_t bisected_trials = 4096;
  std::int64_t bisected_layouts = 40000;
  //! ... or once it has weighed this many splits of a set between two blocks per sample and
  //! rank of the batch (a split costs nanoseconds, a layout thousands of them where all its
  //! splits are tried): the search's cost follows the batch's size, as the rest of the planner's
  //! does. At 32, 100-sample batches on 48 ranks plan in 1-4 ms, not 60-120; long_tail/48/s2
  //! under length^2/cp, the batch that needs most (50 per sample and rank in all), keeps its
  //! plan from 16 up.
  double bisected_work = 32;
  //! The rounds also with ranks left free for the other samples (each round's members on a block
  //! of eighths of the world, `detail::reserved_blocks`), at the round count where that promises
  //! the least time; those samples dealt first to the free ranks, the rest packed apart; the
  //! fastest plan competes. context_ext/64 two-tier: a round's long samples on 16 ranks, its
  //! other 48 holding short ones, 0.956 -> 0.984 of the budget-aware bound. Built at one count
  //! only: at every count, its packings of the rest cost long_tail/48/s3 under length^2/cp 77%
  //! more instructions per plan; at one, 0.2% (long_tail/24/s1, whose plan it improves, 13%).
  bool bisected_reserve = true;

  // ---- the levelled construction ---------------------------------------------------------------
  //! A sample may join a group of a larger CP size when that costs at most this factor of its
  //! rank area (the first run; the variants use the two below).
  double reach_area = 1.05;
  double narrow_reach_area = 1.0; //!< first variant: only where the area does not grow
  double wide_reach_area = 1.10;  //!< second variant: where a batch needs wide groups filled
  //! A sample above its round's level moves to a larger group when its area grows at most by
  //! this factor: long samples, whose attention dominates, spread almost for free.
  double raise_area = 1.02;
  //! Fourth variant: the default reach with raises up to this factor of area. Where a long
  //! sample must span nodes, a larger group costs it more area (the slower ring), but leaving it
  //! on its smallest group makes its round as slow as it: on the two-tier h100 model this lifts
  //! long_tail/48/s3 from 0.89 to 0.96 and long_tail/s1 from 0.925 to 0.95.
  double wide_raise_area = 1.25;
  //! The first levelled run (the only one past `levelled_variants_limit`) lets samples that fit
  //! no group within their reach ride in a larger group's slack (`levelled_reach::free_ride`);
  //! below the limit the same run without rides competes too. On the two-tier h100 model rides
  //! lift long_tail/1024 from 0.920 to 0.943 (past Megatron's 0.930), but lose on some smaller
  //! batches (long_tail/s1 0.943 -> 0.932 alone): hence both where both are affordable.
  bool free_ride = true;
  //! A ride costs the rider at most this factor of its area: short samples riding in a wide
  //! group pay its ring's latency many times over (bimodal/96/s2 loses 0.969 -> 0.961 at 4x).
  double ride_area = 2.0;
  //! Third variant: a sample costing more than this share of its round's level joins no group
  //! (two heavy samples stacked make one group as slow as both); 0 drops the variant.
  double heavy_share = 0.4;
  //! Where the levelled rounds must be raised to the micro-batch multiple and their groups hold
  //! at least this many samples each on average, rounds are halved inside their groups
  //! (`halve_to_multiple`: every rank keeps working); with fewer, they are split by groups
  //! (`split_to_multiple`), whose idle ranks let the local search widen the groups of long
  //! samples. 2,500 samples of 1-64 tokens on 6 ranks at a multiple of 16 (~100 per group):
  //! planning 0.55 s -> 0.03 s; 83 samples on 96 ranks at a multiple of 3 (~1 per group):
  //! halving there would be 41% slower.
  double halve_samples_per_group = 4;
  //! A round ends early only after this many misses in a row (a full scan is cheap before)...
  std::int32_t early_end_misses = 256;
  //! ...that are at least 1/this of the samples left, and is checked again after 1/this more.
  std::int32_t early_end_fraction = 8;
  //! A full round (no free ranks, no room for the smallest sample) is looked for every this
  //! many misses: checking after each would cost more than the misses it saves.
  std::int32_t full_round_check_every = 16;

  // ---- the targeted construction and placement
  // ---------------------------------------------------
  //! Groups examined per CP size when placing a sample: enough to find token room past the
  //! first few full groups, few enough to keep placement O(log groups).
  std::int32_t candidates_per_size = 8;
  //! Passes that raise CP sizes toward the per-rank target (the target falls as sizes rise;
  //! it settles within three).
  std::int32_t raise_passes = 3;

  // ---- portfolio -------------------------------------------------------------------------------
  //! With `extra_microbatches = -1`, up to 1/this more rounds than the token minimum (at least
  //! one micro-batch multiple); every round pays the micro-batch overhead, so the rounds a plan
  //! takes are the ones that pay for themselves. 1 (up to twice the minimum): under the two-tier
  //! network the benchmark's bimodal/s1 needs 33 rounds where the token minimum is 24 (0.82 of
  //! the bound at 30 or fewer, 0.99 at 33), since a sample that must span nodes is best left
  //! alone in its group rather than joined by short ones that pay its slow ring.
  std::int32_t extra_rounds_divisor = 1;
  //! After the portfolio, the local search runs once more on the best plan with a micro-batch
  //! multiple of empty rounds added (within the allowance), up to `spill_limit` samples x ranks,
  //! this many times while it pays: no construction takes a round just to shed a dominant
  //! sample's small companions (three samples on 32 ranks, one of 64K: 0.969 s in one round,
  //! 0.876 s in two). Under length^2/cp it lifts long_tail/48/s1 from 0.89 to 0.96 and pareto/s3
  //! from 0.94 to 0.975 of the bound; on the benchmark a second pass never paid.
  std::int32_t spill_passes = 1;
  std::int64_t spill_limit = std::int64_t{1} << 17;
  //! Tiles of ranks are traded between the best plan's rounds (`detail::exchange_tiles`) before
  //! the final search and last of all, the tile sizes swept up to this many times while one
  //! pays; 0 turns it off. Two-tier long_tail/1024: 0.948 -> 0.958 of the budget-aware bound, as
  //! the 16-rank groups of its long samples gather in fewer rounds; 72 of the benchmark's 180
  //! plans faster, one 0.02% slower. A second sweep gained 0.0001 s on long_tail/1024, nothing
  //! else.
  std::int32_t tile_exchange_sweeps = 1;
  //! A construction this factor slower than the best plan so far is not improved: the local
  //! search does not close such a gap, and it is the costly part.
  double improve_within = 1.25;
  //! ...except the megatron construction's plan, improved after the other steps where it is
  //! within this factor of the best: from that start the local search does close wider gaps
  //! (three seeded batches on 3 ranks at multiples 2-4 started 1.42-1.50x behind and won by up
  //! to 5%), but not one 5.4x behind (2,500 samples of 1-64 tokens on 6 ranks at a multiple of
  //! 16: 2.96x after 0.54 s of search, 80% of the planning time).
  double megatron_improve_within = 2;
  //! Past the megatron limit, the megatron plan still competes, as it is and last, where the
  //! batch has at most this many samples per rank: there the groups must take the ranks the
  //! samples leave, which megatron_greedy does and the constructions may not (4,096 samples of
  //! 1-8K tokens on 4,096 contiguous ranks: 0.48 of the bound, one sample per rank, against
  //! megatron_greedy's 0.90; on 256 and 1,024 ranks 0.6% and 3% slower). It costs a
  //! megatron_greedy run (0.6 s on 16,384 contiguous ranks). 0 drops it.
  double megatron_samples_per_rank = 16;
  //! In the contiguous topology, the portfolio also runs on the aligned sizes alone (powers of
  //! two, aligned first ranks: legal contiguous groups at the same cost), and the local search
  //! improves that plan with every contiguous size. The contiguous ladders (a sample's smallest
  //! size, doubled) cut the world into ranges that pack worse: on the two-tier h100 model
  //! long_tail/s1 went 0.873 -> 0.943 of the bound with it, and long_tail/s2 and /s3, 1% slower
  //! than megatron_greedy before, now beat it. It about doubles the planning time there, so it
  //! runs only where the best plan so far is more than `aligned_gap` above the lower bound (under
  //! length^2/cp the contiguous plans are within 0.1% of it, and short_only/s1 would take 81 ms
  //! instead of 39 for nothing).
  bool aligned_in_contiguous = true;
  double aligned_gap = 5e-3;
  //! A plan within this fraction of the lower bound ends the portfolio: no other step or pass
  //! can gain more than rounding noise...
  double bound_reached = 1e-9;
  //! ...and past `levelled_variants_limit`, within this one: a gain of at most half a percent is
  //! not worth the levelled run on a large batch (65,536 samples on 1,024 ranks under
  //! length^2/cp: the fixed-size plan is within 0.4% of the bound, and the levelled run after it
  //! would double the planning time to 66 ms, past the 50 ms target).
  double bound_reached_large = 5e-3;
  //! A larger CP size counts as less area only below this factor of the smaller one's: rounding
  //! noise in cost x cp must not pick a larger group.
  double area_noise = 1.0 - 1e-9;

  // ---- the local search
  // --------------------------------------------------------------------------
  //! Sweeps over the rounds: the search has converged long before on every benchmark batch.
  std::int32_t improvement_sweeps = 16;
  //! Moves per round and sweep, in multiples of the world size (every rank's group once).
  std::int32_t moves_per_rank = 4;
  //! Groups examined per CP size for a move or a swap: wide below `wide_search_limit` (finds
  //! better moves on small batches), narrow above it (where each examined group costs most).
  std::int32_t wide_candidates = 64;
  std::int32_t narrow_candidates = 8;
  std::int64_t wide_search_limit = std::int64_t{1} << 18;
  //! The best plan goes through the search once more with `final_candidates_factor` times the
  //! candidates, where it is not at the lower bound yet, on batches below `wide_search_limit`
  //! (64 -> 256) and from `final_search_from` on (8 -> 32); once, on one plan, it costs a few to
  //! 25 ms where a wider search for every construction would not. Two-tier: long_tail/1024
  //! 19.794 -> 19.758 s (past megatron_greedy's contiguous 19.787) for 6 ms, long_tail/s1
  //! 9.430 -> 9.423 and bimodal/96/s2 16.221 -> 16.196 for 12-19 ms; 32 for every construction
  //! took long_tail/1024 under length^2/cp from 35 to 57 ms. Between the two (where the 1 ms
  //! target of 4,096 samples on 64 ranks lies) it would cost sft_lognormal/s1 0.85 -> 1.2 ms for
  //! 0.002%.
  std::int32_t final_candidates_factor = 4;
  std::int64_t final_search_from = std::int64_t{1} << 22;
  //! Swaps: samples of other groups examined per sample of the critical group and CP size. A
  //! swap looks at every sample of each candidate group, so groups of hundreds of tiny samples
  //! made the search quadratic in them (20,000 samples of 1-64 tokens on 6 ranks with a
  //! micro-batch multiple of 16: 127 s); the cap leaves groups of up to 16 samples at 64
  //! candidates untouched.
  std::int64_t swap_samples = 1024;
  //! The search's headroom index is a heap from this many groups on, else a std::set (the same
  //! order, so the same plans; `set_headroom_index`, `heap_headroom_index`): where a round's
  //! maximum moves, each of its groups is filed again, and the set's node updates took 17% of
  //! the planning of 65,536 samples on 1,024 ranks, while on small batches its walks are cheaper
  //! (a heap's walk costs more per entry: with heaps everywhere, long_tail/s1 planned 1.4x
  //! slower).
  std::int64_t heap_index_groups = 4096;
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
             within("ride_area", ride_area, 0, big),
             within("heavy_share", heavy_share, 0, big),
             within("halve_samples_per_group", halve_samples_per_group, 0, big),
             within("improve_within", improve_within, 1, big),
             within("megatron_improve_within", megatron_improve_within, 1, big),
             within("megatron_samples_per_rank", megatron_samples_per_rank, 0, big),
             within("aligned_gap", aligned_gap, 0, big),
             within("chunked_gap", chunked_gap, 0, big),
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
