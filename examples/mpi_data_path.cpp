// The data path end to end under MPI (`mpirun -np 4 mpi_data_path`): every rank holds its own
// shard of samples; lengths are gathered, every rank plans, the plan is checked collectively,
// tokens are routed into packed THD buffers, a stand-in model produces per-token outputs, and
// the outputs are routed back to the samples' origin ranks in their original order; a stand-in
// head-parallel layer (a running sum per head over whole sequences) goes through cp2hp / hp2cp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include <dcpp/comm/mpi.hpp>
#include <dcpp/dcpp.hpp>
#include <dcpp/io/guarded_main.hpp>
#include <dcpp/route/head_parallel.hpp>
#include <dcpp/route/router.hpp>
#include <dcpp/workload/generators.hpp>

int main(int argc, char** argv) {
  dcpp::mpi_environment mpi(&argc, &argv);
  auto world = dcpp::mpi_communicator::world();
  return dcpp::guarded_main(fmt::format("rank {}: ", world.rank()), [&]() -> int {
    // Each rank's data-loader shard: a long-tailed mix, different on every rank, with samples
    // up to 40,000 tokens or what the world's largest group holds (16,384 tokens per rank): so
    // it runs on any number of ranks.
    const std::int64_t longest = std::min<std::int64_t>(
        40000, std::int64_t{std::bit_floor(static_cast<std::uint32_t>(world.size()))} * 16384);
    // [shard]
    using shard_type =
        dcpp::token_shard<dcpp::fields::token_ids, dcpp::fields::labels, dcpp::fields::loss_mask>;
    shard_type shard;
    shard.lengths =
        dcpp::workload::long_tail(6, 100 + static_cast<std::uint64_t>(world.rank()), 0.2, longest);
    for (const std::int64_t length : shard.lengths)
      for (std::int64_t t = 0; t < length; ++t) {
        shard.get<dcpp::fields::token_ids>().push_back(static_cast<std::int32_t>(t % 32000));
        shard.get<dcpp::fields::labels>().push_back(static_cast<std::int32_t>((t + 1) % 32000));
        shard.get<dcpp::fields::loss_mask>().push_back(t + 1 < length ? 1 : 0);
      }
    // [shard]

    // [plan-and-route]
    dcpp::plan_options options;
    options.world_size = world.size();
    options.max_tokens_per_rank = 16384;
    dcpp::planner<> planner(options);
    // Gathers lengths, plans on every rank, re-places groups for locality, checks the plan hash.
    auto router = dcpp::plan_step(planner, world, shard);

    std::vector<float> logprobs(static_cast<std::size_t>(router.shard_tokens()), NAN);
    for (std::size_t mb = 0; mb < router.microbatches(); ++mb) {
      const auto batch = router.dispatch(mb, shard); // this rank's packed THD buffer
      // ... the model runs here on batch.get<dcpp::fields::token_ids>(), with
      // batch.layout.cu_seqlens / cu_seqlens_padded and the group
      // world.group_for(batch.layout.first_rank, batch.layout.cp) ...
      std::vector<float> out(static_cast<std::size_t>(batch.tokens()));
      for (std::size_t t = 0; t < out.size(); ++t)
        out[t] = -0.001f * static_cast<float>(batch.position_ids[t]); // stand-in model output
      router.combine(mb, std::span<const float>(out), std::span<float>(logprobs));
    }
    // [plan-and-route]

    // The same micro-batches through a head-parallel layer (Gated DeltaNet, Mamba), which needs
    // whole sequences per head: cp2hp gives this rank all tokens of its group's sequences for
    // heads / cp of the heads, the layer runs, hp2cp brings the result back to the zigzag chunks.
    std::int64_t head_wrong = 0; // head-parallel results off their expected value
    for (std::size_t mb = 0; mb < router.microbatches(); ++mb) {
      const auto batch = router.dispatch(mb, shard);
      // [head-parallel]
      const dcpp::head_shape shape{.heads = 4, .head_dim = 2};
      std::vector<float> hidden(static_cast<std::size_t>(dcpp::cp_elements(batch.layout, shape)));
      for (std::size_t t = 0; t < static_cast<std::size_t>(batch.tokens()); ++t)
        for (std::size_t e = 0; e < 8; ++e)
          hidden[t * 8 + e] = batch.is_real[t] != 0 ? 1.0f : 0.0f; // stand-in activations
      std::vector<float> heads(static_cast<std::size_t>(dcpp::hp_elements(batch.layout, shape)));
      dcpp::cp2hp(world, batch.layout, shape, std::span<const float>(hidden),
                  std::span<float>(heads));
      const auto& cu = batch.layout.cu_seqlens_padded;
      const std::size_t row = heads.size() / static_cast<std::size_t>(std::max(1, cu.back()));
      for (std::size_t i = 0; i + 1 < cu.size(); ++i) // stand-in layer: a causal running sum
        for (auto t = static_cast<std::size_t>(cu[i]) + 1; t < static_cast<std::size_t>(cu[i + 1]);
             ++t)
          for (std::size_t e = 0; e < row; ++e)
            heads[t * row + e] += heads[(t - 1) * row + e];
      dcpp::hp2cp(world, batch.layout, shape, std::span<const float>(heads),
                  std::span<float>(hidden));
      // [head-parallel]
      for (std::size_t t = 0; t < static_cast<std::size_t>(batch.tokens()); ++t)
        if (batch.is_real[t] != 0) // real token at position p: the sum of p + 1 ones
          for (std::size_t e = 0; e < 8; ++e)
            head_wrong += hidden[t * 8 + e] != static_cast<float>(batch.position_ids[t] + 1);
    }

    // Every output came back to its token: position t of each local sample got -0.001 * t.
    std::int64_t wrong = 0, at = 0;
    for (const std::int64_t length : shard.lengths)
      for (std::int64_t t = 0; t < length; ++t, ++at)
        wrong += logprobs[static_cast<std::size_t>(at)] != -0.001f * static_cast<float>(t);
    wrong = static_cast<std::int64_t>(world.all_reduce_max(static_cast<std::uint64_t>(wrong)));
    head_wrong =
        static_cast<std::int64_t>(world.all_reduce_max(static_cast<std::uint64_t>(head_wrong)));

    const auto volume = dcpp::measure_route(router.get_plan(), router.origins());
    if (world.rank() == 0) {
      fmt::print("{}", router.get_plan());
      fmt::print("routing: {} of {} tokens cross the network ({:.1f}% stay on their rank)\n",
                 volume.tokens_remote, volume.tokens_total,
                 100.0 * static_cast<double>(volume.tokens_local) /
                     static_cast<double>(volume.tokens_total));
      fmt::print("inverse route: {}\n",
                 wrong == 0 ? "every output is back at its token" : "outputs are misplaced");
      fmt::print("head-parallel exchange: {}\n", head_wrong == 0
                                                     ? "every running sum is whole-sequence"
                                                     : "running sums are wrong");
    }
    return wrong == 0 && head_wrong == 0 ? 0 : 1;
  });
}
