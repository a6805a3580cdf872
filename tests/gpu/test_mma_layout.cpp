// gpu / MMA layout: the device's m16n8k16 tensor-core product against the host launcher's
// emulation of it (simt::host_context::mma_m16n8k16) and against an fp64 product placed by the
// fragment maps (mma_a_coord, mma_b_coord, mma_c_coord), for fp16 and bf16. Inputs are small
// integers, so every product and sum is exact in fp32: the three must agree bit for bit, and a
// lane or register placed wrong shows at once. Exits 77 without a device.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "dcpp/core/float16.hpp"
#include "dcpp/core/simt.hpp"
#include "dcpp/cuda/memory.hpp"
#include "dcpp/simt/host_launcher.hpp"

cudaError_t dcpp_test_mma_on_device(bool bf16, const dcpp::simt::mma_a_fragment* a,
                                    const dcpp::simt::mma_b_fragment* b,
                                    dcpp::simt::mma_accumulator* d);

namespace {

using dcpp::simt::mma_a_fragment;
using dcpp::simt::mma_accumulator;
using dcpp::simt::mma_b_fragment;

template <class T>
int check(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-4, 4);
  double A[16][16], B[16][8], C[16][8];
  for (auto& row : A)
    for (double& x : row)
      x = small(rng);
  for (auto& row : B)
    for (double& x : row)
      x = small(rng);
  for (auto& row : C)
    for (double& x : row)
      x = small(rng);
  std::vector<mma_a_fragment> a(32);
  std::vector<mma_b_fragment> b(32);
  std::vector<mma_accumulator> c(32);
  for (unsigned lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r) {
      const auto lo = dcpp::simt::mma_a_coord(lane, 2 * r),
                 hi = dcpp::simt::mma_a_coord(lane, 2 * r + 1);
      a[lane].x[r] =
          dcpp::simt::mma_pack(dcpp::from_float<T>(static_cast<float>(A[lo.row][lo.col])),
                               dcpp::from_float<T>(static_cast<float>(A[hi.row][hi.col])));
    }
    for (int r = 0; r < 2; ++r) {
      const auto lo = dcpp::simt::mma_b_coord(lane, 2 * r),
                 hi = dcpp::simt::mma_b_coord(lane, 2 * r + 1);
      b[lane].x[r] =
          dcpp::simt::mma_pack(dcpp::from_float<T>(static_cast<float>(B[lo.row][lo.col])),
                               dcpp::from_float<T>(static_cast<float>(B[hi.row][hi.col])));
    }
    for (int e = 0; e < 4; ++e) {
      const auto at = dcpp::simt::mma_c_coord(lane, e);
      c[lane].x[e] = static_cast<float>(C[at.row][at.col]);
    }
  }
  // the host launcher's emulation
  std::vector<mma_accumulator> host = c;
  dcpp::simt::host_launch({{1, 1, 1}, {32, 1, 1}, 0}, [&](dcpp::simt::host_context& ctx) {
    const unsigned lane = ctx.thread_index().x;
    host[lane] = ctx.mma_m16n8k16<T>(a[lane], b[lane], c[lane]);
  });
  // the device
  const dcpp::detail::device_array<mma_a_fragment> da(a);
  const dcpp::detail::device_array<mma_b_fragment> db(b);
  dcpp::detail::device_array<mma_accumulator> dd(c);
  dcpp::detail::cuda_check(
      dcpp_test_mma_on_device(std::is_same_v<T, dcpp::bfloat16>, da.data(), db.data(), dd.data()),
      "mma kernel");
  std::vector<mma_accumulator> device(32);
  dcpp::detail::cuda_check(
      cudaMemcpy(device.data(), dd.data(), 32 * sizeof(mma_accumulator), cudaMemcpyDeviceToHost),
      "cudaMemcpy");
  int wrong = 0;
  for (unsigned lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) {
      const auto at = dcpp::simt::mma_c_coord(lane, e);
      double want = C[at.row][at.col];
      for (int k = 0; k < 16; ++k)
        want += A[at.row][k] * B[k][at.col];
      const float h = host[lane].x[e], d = device[lane].x[e];
      if (h != static_cast<float>(want) || d != static_cast<float>(want)) {
        if (wrong++ < 8)
          std::printf("lane %u element %d (row %d, column %d): fp64 %g, host %g, device %g\n", lane,
                      e, at.row, at.col, want, h, d);
      }
    }
  return wrong;
}

} // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device: skipping the MMA layout check");
    return 77;
  }
  int wrong = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    wrong += check<dcpp::half>(seed);
    wrong += check<dcpp::bfloat16>(100 + seed);
  }
  std::printf("MMA layout: %d elements disagree\n", wrong);
  return wrong == 0 ? 0 : 1;
}
