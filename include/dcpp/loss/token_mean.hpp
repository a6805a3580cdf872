// The exact global per-token loss mean: the loss-token reduction kernels run on the CPU through
// the host launcher (CUDA: kernels/dcpp/kernels/loss/token_reduce.cuh), then one all-reduce of the
// rank's [sums..., counts...] through the communicator.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "dcpp/comm/communicator.hpp"
#include "dcpp/error.hpp"
#include "dcpp/kernels/loss/token_reduce.hpp"
#include "dcpp/simt/host_launcher.hpp"

namespace dcpp {

//! Checks the reduction's inputs against a buffer of `tokens` tokens: heads >= 1, cu_seqlens
//! starting at 0, non-decreasing, ending within the buffer, pointers present.
template <class Loss, class Acc>
[[nodiscard]] status check_token_reduce(const kernels::token_reduce_params<Loss, Acc>& p,
                                        std::int64_t tokens) {
  auto fail = [](std::string message) {
    return status::failure(status_code::invalid_option, std::move(message));
  };
  if (p.heads < 1 || p.heads > 65535)
    return fail(fmt::format("token_reduce: heads = {} must be in [1, 65535]", p.heads));
  if (p.sequences < 0)
    return fail(fmt::format("token_reduce: sequences = {} is negative", p.sequences));
  if (p.cu_seqlens == nullptr || p.losses == nullptr || p.mask == nullptr || p.totals == nullptr ||
      (p.sequences > 0 && (p.sums == nullptr || p.counts == nullptr)))
    return fail("token_reduce: a required pointer (losses, mask, cu_seqlens, sums, counts, "
                "totals) is null");
  if (p.cu_seqlens[0] != 0)
    return fail(fmt::format("token_reduce: cu_seqlens[0] = {} must be 0", p.cu_seqlens[0]));
  for (int s = 0; s < p.sequences; ++s)
    if (p.cu_seqlens[s + 1] < p.cu_seqlens[s])
      return fail(fmt::format("token_reduce: cu_seqlens[{}] = {} is below cu_seqlens[{}] = {}",
                              s + 1, p.cu_seqlens[s + 1], s, p.cu_seqlens[s]));
  if (p.cu_seqlens[p.sequences] > tokens)
    return fail(fmt::format("token_reduce: cu_seqlens[{}] = {} exceeds the {} tokens of the buffer",
                            p.sequences, p.cu_seqlens[p.sequences], tokens));
  if (p.heads > 1 && (p.loss_head_stride < p.cu_seqlens[p.sequences] ||
                      (p.mask_head_stride != 0 && p.mask_head_stride < p.cu_seqlens[p.sequences])))
    return fail(fmt::format("token_reduce: head strides (losses {}, mask {}) are shorter than the "
                            "{} tokens of a head",
                            p.loss_head_stride, p.mask_head_stride, p.cu_seqlens[p.sequences]));
  return status::success();
}

//! Runs the per-(sequence, head) reduction and the per-head totals on the CPU, through the host
//! launcher (the kernels' own source). Throws dcpp::error when `check_token_reduce` fails.
template <class Loss, class Acc>
void token_reduce_on_host(const kernels::token_reduce_params<Loss, Acc>& p, std::int64_t tokens,
                          const simt::host_launch_options& options = {}) {
  throw_if_failed(check_token_reduce(p, tokens));
  const std::size_t shared = kernels::token_reduce_shared_bytes<Acc>();
  if (p.sequences > 0)
    simt::host_launch(
        simt::launch_shape{{static_cast<unsigned>(p.sequences), static_cast<unsigned>(p.heads), 1},
                           {kernels::token_reduce_threads, 1, 1},
                           shared},
        [&p](simt::host_context& ctx) { kernels::token_reduce_body(ctx, p); }, options);
  simt::host_launch(
      simt::launch_shape{
          {static_cast<unsigned>(p.heads), 1, 1}, {kernels::token_reduce_threads, 1, 1}, shared},
      [&p](simt::host_context& ctx) { kernels::token_totals_body(ctx, p); }, options);
}

//! The global result per loss head: token sums and counts over every rank, the exact mean and
//! the gradient scale `1 / T_global` (the factor every token's loss gradient gets). A head with
//! no loss token has mean 0 and scale 0.
struct token_mean {
  std::vector<double> sums;
  std::vector<std::int64_t> counts;
  std::vector<double> mean;
  std::vector<double> gradient_scale;
};

//! From totals already all-reduced (`[sums..., counts...]`, e.g. on the device with NCCL).
[[nodiscard]] inline token_mean token_mean_from_totals(std::span<const double> reduced, int heads) {
  DCPP_EXPECTS(heads >= 1 && reduced.size() == 2 * static_cast<std::size_t>(heads));
  token_mean out;
  for (int h = 0; h < heads; ++h) {
    const double sum = reduced[static_cast<std::size_t>(h)];
    const auto count = static_cast<std::int64_t>(reduced[static_cast<std::size_t>(heads + h)]);
    out.sums.push_back(sum);
    out.counts.push_back(count);
    out.mean.push_back(count > 0 ? sum / static_cast<double>(count) : 0.0);
    out.gradient_scale.push_back(count > 0 ? 1.0 / static_cast<double>(count) : 0.0);
  }
  return out;
}

//! One all-reduce (sum) of this rank's `[sums..., counts...]` (the `totals` of the reduction),
//! in fp64: counts are exact below 2^53 tokens. Collective; every rank gets the same result.
template <communicator C, class Acc>
requires(C::buffer_memory == memory_space::host) [[nodiscard]] token_mean
    global_token_mean(C& comm, std::span<const Acc> totals, int heads) {
  status local = status::success();
  if (heads < 1 || totals.size() != 2 * static_cast<std::size_t>(heads))
    local = status::failure(status_code::invalid_option,
                            fmt::format("global_token_mean: {} totals for {} heads, expected {}",
                                        totals.size(), heads, 2 * heads));
  throw_unless_agreed(comm, local);
  std::vector<double> reduced(totals.begin(), totals.end());
  comm.all_reduce(std::span<double>(reduced), reduce_op::sum);
  return token_mean_from_totals(reduced, heads);
}

} // namespace dcpp
