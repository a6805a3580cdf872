// Tests for include/dcpp/comm/nccl.hpp on a device: a one-rank NCCL communicator moves device
// buffers correctly (all-gather, all-to-all-v, all-reduce, broadcast, exchange, metadata calls).
// Built whenever NCCL is found; exits 77 (skip) when no CUDA device is present.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../support.hpp"

#include <cstdio>
#include <vector>

#include "dcpp/comm/nccl.hpp"

namespace {
template <class T>
struct device_vector {
  explicit device_vector(const std::vector<T>& host) : n(host.size()) {
    dcpp::detail::cuda_check(cudaMalloc(&data, std::max<std::size_t>(n, 1) * sizeof(T)),
                             "cudaMalloc");
    dcpp::detail::cuda_check(cudaMemcpy(data, host.data(), n * sizeof(T), cudaMemcpyHostToDevice),
                             "cudaMemcpy");
  }
  ~device_vector() { cudaFree(data); }
  std::vector<T> host() const {
    std::vector<T> out(n);
    dcpp::detail::cuda_check(cudaMemcpy(out.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost),
                             "cudaMemcpy");
    return out;
  }
  std::span<T> span() { return {data, n}; }
  std::span<const T> cspan() const { return {data, n}; }
  T* data = nullptr;
  std::size_t n;
};

dcpp::nccl_communicator one_rank() {
  ncclUniqueId id{};
  dcpp::detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return dcpp::nccl_communicator::init(id, 0, 1, nullptr);
}
} // namespace

TEST_CASE("nccl_communicator: one rank moves device buffers") {
  auto c = one_rank();
  REQUIRE(c.size() == 1);
  device_vector<double> in({1.5, 2.5, 3.5}), out({0, 0, 0});
  c.all_gather(in.cspan(), out.span());
  cudaStreamSynchronize(c.stream());
  CHECK(out.host() == std::vector<double>{1.5, 2.5, 3.5});

  device_vector<std::int64_t> v({4, -2});
  c.all_reduce(v.span(), dcpp::reduce_op::max);
  c.broadcast(v.span(), 0);
  cudaStreamSynchronize(c.stream());
  CHECK(v.host() == std::vector<std::int64_t>{4, -2});

  const std::vector<std::int64_t> counts{3};
  device_vector<double> moved({0, 0, 0});
  c.all_to_all_v(in.cspan(), std::span<const std::int64_t>(counts), moved.span(),
                 std::span<const std::int64_t>(counts));
  auto h = c.exchange(in.cspan(), 0, out.span(), 0);
  h.wait();
  CHECK(moved.host() == in.host());
  CHECK(out.host() == in.host());

  const std::vector<std::int64_t> lengths{7, 0, 9};
  CHECK(c.all_gather_v(std::span<const std::int64_t>(lengths)) == lengths);
  CHECK(c.all_reduce_min(11) == 11);
  CHECK(c.all_reduce_max(12) == 12);
  CHECK(c.group_for(0, 1).size() == 1);
  CHECK_THROWS_AS((void)c.group_for(1, 1), dcpp::error);
}

int main(int argc, char** argv) {
  if (!dcpp::cuda_device_present()) {
    std::puts("no CUDA device: skipping the NCCL communicator tests");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
