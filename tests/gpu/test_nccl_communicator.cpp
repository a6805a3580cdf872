// Tests for include/dcpp/comm/nccl.hpp on a device: the communicator contract suite (the same as
// for the local and MPI backends) on device buffers, on a one-rank NCCL communicator, plus direct
// checks. Built whenever NCCL is found; exits 77 (skip) when no CUDA device is present.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../support.hpp"

#include <cstdio>
#include <utility>
#include <vector>

#include "../comm/contract.hpp"
#include "dcpp/comm/nccl.hpp"
#if defined(DCPP_TEST_WITH_MPI)
#include "dcpp/comm/mpi.hpp"
#endif

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

} // namespace

//! The contract suite's buffers in device memory for the NCCL backend.
template <class T>
struct dcpp_test::contract::buffer<dcpp::nccl_communicator, T, void> {
  explicit buffer(std::vector<T> init) : n(init.size()) {
    dcpp::detail::cuda_check(cudaMalloc(&data, std::max<std::size_t>(n, 1) * sizeof(T)),
                             "cudaMalloc");
    dcpp::detail::cuda_check(cudaMemcpy(data, init.data(), n * sizeof(T), cudaMemcpyHostToDevice),
                             "cudaMemcpy");
  }
  buffer(buffer&& o) noexcept : data(std::exchange(o.data, nullptr)), n(o.n) {}
  buffer& operator=(buffer&& o) noexcept {
    std::swap(data, o.data);
    std::swap(n, o.n);
    return *this;
  }
  ~buffer() { cudaFree(data); }
  std::span<T> span() { return {data, n}; }
  std::span<const T> cspan() const { return {data, n}; }
  std::vector<T> host() const {
    dcpp::detail::cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<T> out(n);
    dcpp::detail::cuda_check(cudaMemcpy(out.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost),
                             "cudaMemcpy");
    return out;
  }
  T* data = nullptr;
  std::size_t n = 0;
};

namespace {
dcpp::nccl_communicator one_rank() {
  ncclUniqueId id{};
  dcpp::detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return dcpp::nccl_communicator::init(id, 0, 1, nullptr);
}

//! Under mpirun: one GPU per rank, the NCCL world bootstrapped through MPI; else one rank.
dcpp::nccl_communicator world() {
#if defined(DCPP_TEST_WITH_MPI)
  auto mpi = dcpp::mpi_communicator::world();
  if (mpi.size() > 1) {
    int devices = 0;
    dcpp::detail::cuda_check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    dcpp::detail::cuda_check(cudaSetDevice(mpi.rank() % devices), "cudaSetDevice");
    return dcpp::nccl_communicator::bootstrap(mpi, nullptr);
  }
#endif
  return one_rank();
}
} // namespace

TEST_CASE("nccl_communicator: the communicator contract on device buffers") {
  auto c = world();
  CHECK_NOTHROW(dcpp_test::contract::run_all(c));
}

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
#if defined(DCPP_TEST_WITH_MPI)
  dcpp::mpi_environment mpi(&argc, &argv);
#endif
  if (!dcpp::cuda_device_present()) {
    std::puts("no CUDA device: skipping the NCCL communicator tests");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
