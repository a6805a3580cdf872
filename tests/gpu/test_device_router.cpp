// Tests for include/dcpp/route/device_router.hpp on a device: device_router over cuda_route_ops,
// device arrays and a one-rank NCCL communicator (or one GPU per rank under mpirun) against the
// host router on the same plan, bit for bit. Built whenever NCCL is found; exits 77 (skip) when
// no CUDA device is present.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../support.hpp"

#include <cstdio>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../route/round_trip.hpp"
#include "dcpp/comm/local.hpp"
#include "dcpp/comm/nccl.hpp"
#include "dcpp/cuda/memory.hpp"
#include "dcpp/route/cuda_route_ops.hpp"
#include "dcpp/route/device_head_parallel.hpp"
#include "dcpp/route/device_router.hpp"

namespace rt = dcpp_test::route;

namespace {
template <class T>
using device_buffer = dcpp::detail::device_array<T>;
using twin = dcpp::device_router<dcpp::cuda_route_ops, device_buffer, dcpp::nccl_communicator,
                                 rt::token_tag, dcpp::fields::token_ids, dcpp::fields::labels,
                                 dcpp::fields::loss_mask, rt::advantage>;

template <class T>
std::vector<T> download(const device_buffer<T>& d) {
  dcpp::detail::cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<T> out(d.size());
  if (!out.empty())
    dcpp::detail::cuda_check(
        cudaMemcpy(out.data(), d.data(), out.size() * sizeof(T), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  return out;
}

dcpp::nccl_communicator one_rank() {
  ncclUniqueId id{};
  dcpp::detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return dcpp::nccl_communicator::init(id, 0, 1, nullptr);
}
} // namespace

TEST_CASE("device_router on a GPU: the host router's buffers bit for bit, one rank") {
  auto nccl = one_rank();
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    CAPTURE(seed);
    dcpp::run_local(1, [&](dcpp::local_communicator& host_comm) {
      const rt::workload w = rt::make_workload(seed, 1);
      const rt::shard_type shard = rt::make_shard(w, 0, seed);
      dcpp::planner<dcpp::length_squared_cost> planner(w.options);
      auto host = dcpp::plan_step(planner, host_comm, shard);
      twin device(dcpp::cuda_route_ops{nccl.stream()}, nccl, host.get_plan(), host.origins(),
                  w.options.padding_unit);
      twin::arrays_type arrays;
      std::apply(
          [&](auto&... d) {
            std::apply(
                [&](const auto&... h) { ((d = std::remove_reference_t<decltype(d)>(h)), ...); },
                shard.values);
          },
          arrays.values); // the shard uploaded
      for (std::size_t m = 0; m < host.microbatches(); ++m) {
        const auto expected = host.dispatch(m, shard);
        const auto got = device.dispatch(m, arrays);
        CHECK(download(got.position_ids) == expected.position_ids);
        CHECK(download(got.is_real) == expected.is_real);
        CHECK(download(got.fields.get<rt::token_tag>()) == expected.get<rt::token_tag>());
        CHECK(download(got.fields.get<rt::advantage>()) == expected.get<rt::advantage>());
        CHECK(download(got.fields.get<dcpp::fields::loss_mask>()) ==
              expected.get<dcpp::fields::loss_mask>());
      }
    });
  }
}

TEST_CASE("cp2hp / hp2cp on a GPU: a group of one copies its buffer on the device") {
  auto nccl = one_rank();
  dcpp::thd_layout l;
  l.first_rank = 0;
  l.cp = 1;
  l.rank_in_group = 0;
  l.samples = {0, 1};
  l.cu_seqlens = {0, 5, 9};
  l.cu_seqlens_padded = {0, 6, 10};
  const dcpp::head_shape shape{4, 8};
  std::vector<float> values(static_cast<std::size_t>(dcpp::cp_elements(l, shape)));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i) * 0.25f;
  const device_buffer<float> in(values);
  device_buffer<float> heads(values.size()), back(values.size());
  dcpp::cuda_route_ops ops{nccl.stream()};
  dcpp::cp2hp<device_buffer>(ops, nccl, l, shape, std::span<const float>(in.data(), in.size()),
                             std::span<float>(heads.data(), heads.size()));
  dcpp::hp2cp<device_buffer>(ops, nccl, l, shape,
                             std::span<const float>(heads.data(), heads.size()),
                             std::span<float>(back.data(), back.size()));
  CHECK(download(heads) == values);
  CHECK(download(back) == values);
}

int main(int argc, char** argv) {
  if (!dcpp::cuda_device_present()) {
    std::puts("no CUDA device: skipping the device router tests");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
