// Data-path benchmark: bytes that routing moves (every token moved, as planned, locality-aware,
// and the lower bound), the time of the whole path on the local backend, the device router's
// path on Thrust's CPU policy against the host router and a memcpy of the same bytes (when built
// with CCCL), and the bytes and link time of the head-parallel exchange.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "dcpp/comm/local.hpp"
#include "dcpp/dcpp.hpp"
#include "dcpp/route/head_parallel.hpp"
#include "dcpp/route/router.hpp"
#if defined(DCPP_BENCH_THRUST)
#include <cstring>

#include <thrust/system/cpp/execution_policy.h>

#include "dcpp/route/device_router.hpp"
#include "dcpp/route/route_ops.hpp"
#endif
#include "dcpp/workload/generators.hpp"

namespace {

using namespace dcpp;
using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

// token ids + labels + loss mask, the standard payload
constexpr std::int64_t token_bytes = sizeof(fields::token_ids::value_type) +
                                     sizeof(fields::labels::value_type) +
                                     sizeof(fields::loss_mask::value_type);

struct volume_case {
  std::string name;
  std::vector<std::int64_t> lengths; // in rank order: rank r holds samples [r*k, (r+1)*k)
  plan_options options;
};

//! Upper bound on tokens that can stay local: each sample keeps at most the largest share one
//! rank of its group holds (over every legal CP size that fits), wherever it is placed.
std::int64_t most_local_tokens(const std::vector<std::int64_t>& lengths, const plan_options& o) {
  const auto sizes = legal_cp_sizes(o);
  std::int64_t kept = 0;
  for (const auto length : lengths) {
    std::int64_t best = 0;
    for (const std::int32_t cp : sizes) {
      if (tokens_per_rank(o, length, cp) > o.max_tokens_per_rank)
        continue;
      const std::int64_t padded = padded_length(length, cp, o.padding_unit);
      for (std::int64_t q = 0; q < cp; ++q)
        best = std::max(best, zigzag_real_in_chunk(length, padded, cp, q) +
                                  zigzag_real_in_chunk(length, padded, cp, 2 * cp - 1 - q));
    }
    kept += best;
  }
  return kept;
}

void volume_table(bool quick) {
  std::vector<volume_case> cases;
  auto add = [&](std::string name, std::vector<std::int64_t> lengths, std::int32_t world,
                 std::int64_t budget) {
    plan_options o;
    o.world_size = world;
    o.max_tokens_per_rank = budget;
    cases.push_back({std::move(name), std::move(lengths), o});
  };
  add("sft_lognormal 512 x 32", workload::sft_lognormal(512, 1), 32, 16384);
  add("long_tail 4096 x 64", workload::long_tail(4096, 2), 64, 16384);
  add("rl_rollouts 4096 x 64", workload::rl_rollouts(4096, 3), 64, 16384);
  add("short_only 4096 x 64", workload::short_only(4096, 4), 64, 8192);
  add("bimodal 1536 x 96", workload::bimodal(1536, 5), 96, 16384);
  if (!quick)
    add("pareto 65536 x 1024", workload::pareto(65536, 6), 1024, 16384);

  fmt::print("Routing volume ({} bytes per token: ids, labels, loss mask; MB = 1e6 bytes)\n",
             token_bytes);
  fmt::print("{:<24} {:>10} {:>12} {:>12} {:>12} {:>12} {:>9} {:>9}\n", "workload", "tokens",
             "move all MB", "as planned", "locality", "lower bound", "saved", "place ms");
  for (const auto& c : cases) {
    const auto n = static_cast<std::size_t>(c.options.world_size);
    std::vector<std::int64_t> counts(n, static_cast<std::int64_t>(c.lengths.size() / n));
    for (std::size_t r = 0; r < c.lengths.size() % n; ++r)
      ++counts[r];
    planner<> p(c.options);
    plan planned = p.make_plan(c.lengths);
    const auto origins = sample_origins::from_counts(counts, c.lengths);
    const auto before = measure_route(planned, origins);
    const auto start = clock_type::now();
    place_for_locality(planned, origins);
    const double place_ms = ms_since(start);
    const auto after = measure_route(planned, origins);
    const std::int64_t bound = after.tokens_total - most_local_tokens(c.lengths, c.options);
    auto mb = [](std::int64_t tokens) { return static_cast<double>(tokens * token_bytes) / 1e6; };
    fmt::print("{:<24} {:>10} {:>12.2f} {:>12.2f} {:>12.2f} {:>12.2f} {:>8.1f}% {:>9.2f}\n", c.name,
               after.tokens_total, mb(after.tokens_total), mb(before.tokens_remote),
               mb(after.tokens_remote), mb(bound),
               100.0 * (1.0 - static_cast<double>(after.tokens_remote) /
                                  static_cast<double>(after.tokens_total)),
               place_ms);
  }
}

void time_table(bool quick, int repeats) {
  fmt::print("\nWhole data path on the local backend (threads; best of {} runs)\n", repeats);
  fmt::print("{:<8} {:>8} {:>10} {:>6} {:>10} {:>12} {:>12} {:>12}\n", "ranks", "samples", "tokens",
             "mbs", "placement", "plan ms", "dispatch ms", "combine ms");
  for (const int world : quick ? std::vector<int>{4} : std::vector<int>{4, 8}) {
    for (const auto where : {placement::as_planned, placement::locality_aware}) {
      const auto lengths = workload::sft_lognormal(static_cast<std::size_t>(world) * 64, 7);
      plan_options o;
      o.world_size = world;
      o.max_tokens_per_rank = 16384;
      double plan_ms = 1e300, dispatch_ms = 1e300, combine_ms = 1e300;
      std::int64_t tokens = 0;
      std::size_t mbs = 0;
      for (int rep = 0; rep < repeats; ++rep) {
        std::vector<double> t_plan(static_cast<std::size_t>(world)), t_dispatch(t_plan.size()),
            t_combine(t_plan.size());
        run_local(world, [&](local_communicator& c) {
          token_shard<fields::token_ids, fields::labels, fields::loss_mask> shard;
          for (std::size_t i = static_cast<std::size_t>(c.rank()) * 64;
               i < static_cast<std::size_t>(c.rank() + 1) * 64; ++i) {
            shard.lengths.push_back(lengths[i]);
            for (std::int64_t t = 0; t < lengths[i]; ++t) {
              shard.get<fields::token_ids>().push_back(static_cast<std::int32_t>(t % 32000));
              shard.get<fields::labels>().push_back(static_cast<std::int32_t>((t + 1) % 32000));
              shard.get<fields::loss_mask>().push_back(1);
            }
          }
          planner<> p(o);
          c.barrier();
          auto start = clock_type::now();
          auto router = plan_step(p, c, shard, where);
          t_plan[static_cast<std::size_t>(c.rank())] = ms_since(start);
          c.barrier();
          start = clock_type::now();
          std::vector<decltype(router)::batch_type> batches;
          for (std::size_t m = 0; m < router.microbatches(); ++m)
            batches.push_back(router.dispatch(m, shard));
          t_dispatch[static_cast<std::size_t>(c.rank())] = ms_since(start);
          c.barrier();
          start = clock_type::now();
          std::vector<float> back(static_cast<std::size_t>(router.shard_tokens()));
          for (std::size_t m = 0; m < batches.size(); ++m) {
            std::vector<float> logprobs(static_cast<std::size_t>(batches[m].tokens()), -1.0f);
            router.combine(m, std::span<const float>(logprobs), std::span<float>(back));
          }
          t_combine[static_cast<std::size_t>(c.rank())] = ms_since(start);
          if (c.rank() == 0) {
            mbs = router.microbatches();
            tokens = 0;
            for (auto l : router.get_plan().lengths)
              tokens += l;
          }
        });
        plan_ms = std::min(plan_ms, *std::max_element(t_plan.begin(), t_plan.end()));
        dispatch_ms =
            std::min(dispatch_ms, *std::max_element(t_dispatch.begin(), t_dispatch.end()));
        combine_ms = std::min(combine_ms, *std::max_element(t_combine.begin(), t_combine.end()));
      }
      fmt::print("{:<8} {:>8} {:>10} {:>6} {:>10} {:>12.2f} {:>12.2f} {:>12.2f}\n", world,
                 lengths.size(), tokens, mbs,
                 where == placement::as_planned ? "planned" : "locality", plan_ms, dispatch_ms,
                 combine_ms);
    }
  }
}

//! One rank's shard of `time_table`'s workload.
token_shard<fields::token_ids, fields::labels, fields::loss_mask>
shard_of(const std::vector<std::int64_t>& lengths, int rank, std::size_t per_rank) {
  token_shard<fields::token_ids, fields::labels, fields::loss_mask> shard;
  for (std::size_t i = static_cast<std::size_t>(rank) * per_rank;
       i < static_cast<std::size_t>(rank + 1) * per_rank; ++i) {
    shard.lengths.push_back(lengths[i]);
    for (std::int64_t t = 0; t < lengths[i]; ++t) {
      shard.get<fields::token_ids>().push_back(static_cast<std::int32_t>(t % 32000));
      shard.get<fields::labels>().push_back(static_cast<std::int32_t>((t + 1) % 32000));
      shard.get<fields::loss_mask>().push_back(1);
    }
  }
  return shard;
}

#if defined(DCPP_BENCH_THRUST)
template <class T>
using vector_of = std::vector<T>;

//! The device router on thrust::cpp::par (the source that runs under Thrust's CUDA policy on a
//! GPU) against the host router and a memcpy of the bytes the packing moves, same plans.
void device_table(bool quick, int repeats) {
  fmt::print("\nDevice router's path on Thrust's CPU policy (thrust::cpp::par, local backend; "
             "best of {} runs; all dispatches of a step, slowest rank)\n",
             repeats);
  fmt::print("{:<6} {:>10} {:>6} {:>12} {:>14} {:>14} {:>12} {:>10}\n", "ranks", "tokens", "mbs",
             "packed MB", "host router ms", "thrust ms", "memcpy ms", "thrust GB/s");
  using ops = thrust_route_ops<decltype(thrust::cpp::par)>;
  for (const int world : quick ? std::vector<int>{4} : std::vector<int>{4, 8}) {
    const auto lengths = workload::sft_lognormal(static_cast<std::size_t>(world) * 64, 7);
    plan_options o;
    o.world_size = world;
    o.max_tokens_per_rank = 16384;
    double host_ms = 1e300, thrust_ms = 1e300, copy_ms = 1e300;
    std::int64_t tokens = 0, packed = 0;
    std::size_t mbs = 0;
    for (int rep = 0; rep < repeats; ++rep) {
      std::vector<double> t_host(static_cast<std::size_t>(world)), t_thrust(t_host.size()),
          t_copy(t_host.size());
      std::vector<std::int64_t> bytes(t_host.size());
      run_local(world, [&](local_communicator& c) {
        const auto shard = shard_of(lengths, c.rank(), 64);
        planner<> p(o);
        auto host = plan_step(p, c, shard);
        device_router<ops, vector_of, local_communicator, fields::token_ids, fields::labels,
                      fields::loss_mask>
            twin(ops{thrust::cpp::par}, c, host.get_plan(), host.origins());
        decltype(twin)::arrays_type arrays;
        arrays.values = shard.values;
        for (std::size_t m = 0; m < host.microbatches(); ++m)
          (void)twin.dispatch(m, arrays); // the maps uploaded, as a step's second use finds them
        const auto me = static_cast<std::size_t>(c.rank());
        c.barrier();
        auto start = clock_type::now();
        for (std::size_t m = 0; m < host.microbatches(); ++m)
          (void)host.dispatch(m, shard);
        t_host[me] = ms_since(start);
        c.barrier();
        start = clock_type::now();
        for (std::size_t m = 0; m < host.microbatches(); ++m)
          (void)twin.dispatch(m, arrays);
        t_thrust[me] = ms_since(start);
        // the floor: the bytes this rank packs and unpacks, copied once each way
        std::int64_t moved = 0;
        for (std::size_t m = 0; m < host.microbatches(); ++m)
          moved += (host.route(m).tokens_sent_remote() + host.route(m).tokens_received_remote() +
                    2 * host.route(m).tokens_kept_local()) *
                   token_bytes;
        std::vector<std::byte> from(static_cast<std::size_t>(moved)), to(from.size());
        c.barrier();
        start = clock_type::now();
        std::memcpy(to.data(), from.data(), from.size());
        t_copy[me] = ms_since(start);
        bytes[me] = moved;
        if (c.rank() == 0) {
          mbs = host.microbatches();
          tokens = 0;
          for (const auto l : host.get_plan().lengths)
            tokens += l;
        }
      });
      const auto slowest = [](const std::vector<double>& t) {
        return *std::max_element(t.begin(), t.end());
      };
      host_ms = std::min(host_ms, slowest(t_host));
      thrust_ms = std::min(thrust_ms, slowest(t_thrust));
      copy_ms = std::min(copy_ms, slowest(t_copy));
      packed = *std::max_element(bytes.begin(), bytes.end());
    }
    fmt::print("{:<6} {:>10} {:>6} {:>12.2f} {:>14.2f} {:>14.2f} {:>12.3f} {:>10.2f}\n", world,
               tokens, mbs, static_cast<double>(packed) / 1e6, host_ms, thrust_ms, copy_ms,
               static_cast<double>(packed) / (thrust_ms * 1e6));
  }
}
#endif

//! The head-parallel exchange: what one cp2hp moves (each rank's bytes to the others) and the
//! time that implies on H100 links (the exchange's floor: nothing else is on its critical path
//! but the pack and unpack, which the device path does at memory speed).
void head_parallel_table(bool quick) {
  fmt::print("\nHead-parallel exchange (cp2hp; hp2cp moves the same): bytes each rank sends per "
             "call, bf16, and the link time that implies (450 GB/s NVLink, 50 GB/s InfiniBand "
             "per GPU)\n");
  fmt::print("{:>9} {:>4} {:>6} {:>5} {:>14} {:>12} {:>10}\n", "sequence", "cp", "heads", "dim",
             "MiB per rank", "NVLink ms", "IB ms");
  struct exchange_case {
    std::int64_t sequence;
    std::int32_t cp, heads;
    std::int64_t dim;
  };
  std::vector<exchange_case> cases{{8192, 2, 16, 64}, {32768, 4, 32, 128}};
  if (!quick) {
    cases.push_back({131072, 8, 32, 128});
    cases.push_back({131072, 8, 8, 128}); // GQA key/value heads
  }
  for (const auto& e : cases) {
    const std::int64_t local_tokens = e.sequence / e.cp;
    const double sent = static_cast<double>(local_tokens) * e.heads * e.dim * 2.0 *
                        static_cast<double>(e.cp - 1) / static_cast<double>(e.cp);
    fmt::print("{:>9} {:>4} {:>6} {:>5} {:>14.1f} {:>12.3f} {:>10.3f}\n", e.sequence, e.cp, e.heads,
               e.dim, sent / (1024.0 * 1024.0), sent / 450e9 * 1e3, sent / 50e9 * 1e3);
  }
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"dcpp data-path benchmark: routing bytes and time"};
  bool quick = false;
  int repeats = 3;
  app.add_flag("--quick", quick, "smaller cases (CI smoke run)");
  app.add_option("--repeats", repeats, "runs per timing, best kept")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  volume_table(quick);
  time_table(quick, repeats);
#if defined(DCPP_BENCH_THRUST)
  device_table(quick, repeats);
#else
  fmt::print("\nDevice router's path: not built (needs CCCL's Thrust headers, from the CUDA "
             "toolkit)\n");
#endif
  head_parallel_table(quick);
  return 0;
}
