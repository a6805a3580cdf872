// Ring attention on a device: cuda_ring_attention (kernels on a compute stream, K/V and dK/dV
// through NCCL on the communicator's stream) against fp64 causal attention, on one GPU (cp = 1)
// and under mpirun with one GPU per rank: dcpp's kernels with the merge fused into the forward
// and with the ring's separate merge, and (built with DCPP_TEST_WITH_CUDNN) cuDNN's SDPA as the
// step kernel. Exits 77 (skip) when no CUDA device is present.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../support.hpp"

#include "dcpp/attention/ring_cuda.hpp"

#include <cstdio>
#include <vector>

#include "../attention/attention_reference.hpp"
#include "dcpp/comm/nccl.hpp"
#if defined(DCPP_TEST_WITH_CUDNN)
#include "dcpp/attention/cudnn_attention.hpp"
#endif
#if defined(DCPP_TEST_WITH_MPI)
#include "dcpp/comm/mpi.hpp"
#endif

namespace {

dcpp::nccl_communicator world(cudaStream_t stream) {
#if defined(DCPP_TEST_WITH_MPI)
  auto mpi = dcpp::mpi_communicator::world();
  if (mpi.size() > 1) {
    int devices = 0;
    dcpp::detail::cuda_check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    dcpp::detail::cuda_check(cudaSetDevice(mpi.rank() % devices), "cudaSetDevice");
    return dcpp::nccl_communicator::bootstrap(mpi, stream);
  }
#endif
  ncclUniqueId id{};
  dcpp::detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return dcpp::nccl_communicator::init(id, 0, 1, stream);
}

template <class T>
std::vector<T> download(const dcpp::detail::device_array<T>& d) {
  std::vector<T> out(d.size());
  dcpp::detail::cuda_check(
      cudaMemcpy(out.data(), d.data(), d.size() * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return out;
}

//! dcpp's kernels without the fused-merge promise: the ring merges each step's partial result.
template <class T>
struct unfused_kernels {
  dcpp::cuda_attention<T> kernels;
  void forward_step(const dcpp::attention_step<T>& s) { kernels.forward_step(s); }
  void backward_step(const dcpp::attention_step<T>& s) { kernels.backward_step(s); }
};

template <class T>
dcpp::cuda_attention<T> dcpp_kernels(const dcpp::ring_partition& part, const dcpp::attention_shape&,
                                     cudaStream_t stream) {
  return dcpp::cuda_attention<T>(part, stream);
}

//! One rank: gathers its rows on the host, runs the device ring with the step kernel
//! `make(partition, shape, stream)` makes, compares with the reference (`slack` times the host
//! tolerances).
template <class T, class Make = decltype(&dcpp_kernels<T>)>
void check(int heads, int kv_heads, int dim, std::uint64_t seed, Make make = &dcpp_kernels<T>,
           double slack = 2) {
  using Policy = decltype(make(std::declval<const dcpp::ring_partition&>(),
                               std::declval<const dcpp::attention_shape&>(), cudaStream_t{}));
  using namespace dcpp_test::attention;
  cudaStream_t comm_stream, compute;
  dcpp::detail::cuda_check(cudaStreamCreate(&comm_stream), "cudaStreamCreate");
  dcpp::detail::cuda_check(cudaStreamCreate(&compute), "cudaStreamCreate");
  auto comm = world(comm_stream);
  const auto b = make_batch<T>(seed, {1, 17, 64, 65, 100, 3}, heads, kv_heads, dim);
  const auto ref = attend(b);
  const auto part = dcpp::ring_partition::padded(b.cu, comm.size(), comm.rank());
  const auto n = static_cast<std::size_t>(part.tokens());
  const std::size_t qn = n * heads * dim, kn = n * kv_heads * dim;
  std::vector<T> q(qn), k(kn), v(kn), dout(qn);
  dcpp::partition_gather_on_host<T>(part, b.q, q, heads * dim);
  dcpp::partition_gather_on_host<T>(part, b.k, k, kv_heads * dim);
  dcpp::partition_gather_on_host<T>(part, b.v, v, kv_heads * dim);
  dcpp::partition_gather_on_host<T>(part, b.dout, dout, heads * dim);
  const dcpp::detail::device_array<T> dq_in(q), dk_in(k), dv_in(v), ddout(dout);
  dcpp::detail::device_array<T> o(qn), dq(qn), dk(kn), dv(kn);
  dcpp::detail::device_array<float> lse(n * heads);
  {
    dcpp::cuda_ring_attention<dcpp::nccl_communicator, T, Policy> ring(
        comm, part, b.shape(), compute, make(part, b.shape(), compute));
    ring.forward(dq_in.data(), dk_in.data(), dv_in.data(), o.data(), lse.data());
    ring.backward(dq_in.data(), dk_in.data(), dv_in.data(), o.data(), lse.data(), ddout.data(),
                  dq.data(), dk.data(), dv.data());
    dcpp::detail::cuda_check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
  }
  const auto ho = download(o), hdq = download(dq), hdk = download(dk), hdv = download(dv);
  const auto hl = download(lse);
  double eo = 0, el = 0, eq = 0, ek = 0, ev = 0;
  auto scale = [](const std::vector<double>& r) {
    double m = 1e-30;
    for (const double x : r)
      m = std::max(m, std::abs(x));
    return m;
  };
  const double so = scale(ref.o), sq = scale(ref.dq), sk = scale(ref.dk), sv = scale(ref.dv);
  const auto& src = part.source_rows();
  for (std::size_t row = 0; row < n; ++row) {
    const std::int64_t g = src[row];
    if (g < 0)
      continue;
    for (int c = 0; c < heads * dim; ++c) {
      eo = std::max(
          eo,
          std::abs(dcpp::to_float(ho[row * heads * dim + c]) - ref.o[g * heads * dim + c]) / so);
      eq = std::max(
          eq,
          std::abs(dcpp::to_float(hdq[row * heads * dim + c]) - ref.dq[g * heads * dim + c]) / sq);
    }
    for (int c = 0; c < kv_heads * dim; ++c) {
      ek = std::max(ek, std::abs(dcpp::to_float(hdk[row * kv_heads * dim + c]) -
                                 ref.dk[g * kv_heads * dim + c]) /
                            sk);
      ev = std::max(ev, std::abs(dcpp::to_float(hdv[row * kv_heads * dim + c]) -
                                 ref.dv[g * kv_heads * dim + c]) /
                            sv);
    }
    for (int h = 0; h < heads; ++h)
      el = std::max(el, std::abs(hl[row * heads + h] - ref.lse[g * heads + h]));
  }
  // On hardware the mma sums in an unspecified order: twice the host tolerances (`slack`).
  CHECK(eo <= slack * tolerance<T>::o);
  CHECK(el <= slack * tolerance<T>::lse);
  CHECK(eq <= slack * tolerance<T>::grad);
  CHECK(ek <= slack * tolerance<T>::grad);
  CHECK(ev <= slack * tolerance<T>::grad);
  cudaStreamDestroy(compute);
  cudaStreamDestroy(comm_stream);
}

} // namespace

TEST_CASE_TEMPLATE("cuda ring attention equals fp64 causal attention", T, float, dcpp::half,
                   dcpp::bfloat16) {
  check<T>(4, 4, 64, 71);
  check<T>(4, 2, 128, 72);
}

TEST_CASE_TEMPLATE("cuda ring attention: the ring's separate merge equals fp64 attention", T, float,
                   dcpp::bfloat16) {
  static_assert(!dcpp::attention_fuses_merge<unfused_kernels<T>>);
  const auto make = [](const dcpp::ring_partition& part, const dcpp::attention_shape&,
                       cudaStream_t stream) {
    return unfused_kernels<T>{dcpp::cuda_attention<T>(part, stream)};
  };
  check<T>(4, 2, 64, 73, make);
}

#if defined(DCPP_TEST_WITH_CUDNN)
TEST_CASE_TEMPLATE("cuda ring attention: cuDNN's SDPA as the step kernel equals fp64 attention", T,
                   dcpp::half, dcpp::bfloat16) {
  cudnnHandle_t handle = nullptr;
  dcpp::detail::cudnn_check(cudnnCreate(&handle), "cudnnCreate");
  const auto make = [&](const dcpp::ring_partition& part, const dcpp::attention_shape& shape,
                        cudaStream_t stream) {
    return dcpp::cudnn_attention<T>(part, shape, handle, stream);
  };
  // cuDNN writes each call's O and gradients in the input type: one rounding more per call
  check<T>(4, 4, 64, 74, make, 4);
  check<T>(4, 2, 128, 75, make, 4);
  cudnnDestroy(handle);
}
#endif

int main(int argc, char** argv) {
#if defined(DCPP_TEST_WITH_MPI)
  dcpp::mpi_environment mpi(&argc, &argv);
#endif
  if (!dcpp::cuda_device_present()) {
    std::puts("no CUDA device: skipping the device ring attention tests");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
