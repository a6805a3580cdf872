// Tests for include/dcpp/simt/host_launcher.hpp and the helpers of include/dcpp/core/simt.hpp:
// indices, block barriers, warp shuffles, shared memory, deadlock and error reporting.
#include "../support.hpp"

#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "dcpp/core/simt.hpp"
#include "dcpp/simt/host_launcher.hpp"

using dcpp::simt::host_context;
using dcpp::simt::index3;
using dcpp::simt::launch_shape;

TEST_CASE("host_launch: every thread of every block runs once with its indices") {
  for (unsigned workers : {1u, 2u}) {
    const launch_shape shape{{3, 2, 2}, {5, 3, 2}, 0};
    std::vector<int> hits(shape.grid.volume() * shape.block.volume(), 0);
    dcpp::simt::host_launch(
        shape,
        [&](host_context& ctx) {
          const index3 b = ctx.block_index(), g = ctx.grid_dim();
          const std::size_t block = b.x + g.x * (b.y + g.y * b.z);
          ++hits[block * ctx.block_dim().volume() + dcpp::simt::thread_rank(ctx)];
        },
        {.workers = workers});
    for (int h : hits)
      CHECK(h == 1);
  }
}

TEST_CASE("host_launch: a block barrier orders shared-memory writes before reads") {
  const unsigned n = 200; // not a multiple of 32: a partial last warp
  std::vector<unsigned> out(n * 3);
  dcpp::simt::host_launch(launch_shape{{3, 1, 1}, {n, 1, 1}, n * sizeof(unsigned)},
                          [&](host_context& ctx) {
                            unsigned* s = ctx.shared_array<unsigned>(n);
                            const unsigned t = ctx.thread_index().x;
                            s[t] = t * 7 + ctx.block_index().x;
                            ctx.sync_block();
                            out[ctx.block_index().x * n + t] = s[n - 1 - t];
                          });
  for (unsigned b = 0; b < 3; ++b)
    for (unsigned t = 0; t < n; ++t)
      CHECK(out[b * n + t] == (n - 1 - t) * 7 + b);
}

TEST_CASE("host_launch: warp shuffles and reductions") {
  std::mt19937_64 rng(3);
  std::vector<double> in(96);
  for (auto& x : in)
    x = std::uniform_real_distribution<double>(-1, 1)(rng);
  std::vector<double> sums(96), maxima(96), broadcast(96), down(96), block(96);
  dcpp::simt::host_launch(launch_shape{{1, 1, 1}, {96, 1, 1}, 32 * sizeof(double)},
                          [&](host_context& ctx) {
                            const unsigned t = ctx.thread_index().x;
                            double* scratch = ctx.shared_array<double>(32);
                            sums[t] = dcpp::simt::warp_sum(ctx, in[t]);
                            maxima[t] = dcpp::simt::warp_max(ctx, in[t]);
                            broadcast[t] = ctx.shuffle(in[t], 5);
                            down[t] = ctx.shuffle_down(in[t], 3u);
                            block[t] = dcpp::simt::block_sum(ctx, in[t], scratch);
                          });
  double total = 0;
  for (unsigned w = 0; w < 3; ++w) {
    double s = 0, m = -2;
    for (unsigned l = 0; l < 32; ++l) {
      s += in[w * 32 + l];
      m = std::max(m, in[w * 32 + l]);
    }
    total += s;
    for (unsigned l = 0; l < 32; ++l) {
      const unsigned t = w * 32 + l;
      CHECK(sums[t] == doctest::Approx(s).epsilon(1e-14));
      CHECK(maxima[t] == m);
      CHECK(broadcast[t] == in[w * 32 + 5]);
      CHECK(down[t] == (l + 3 < 32 ? in[t + 3] : in[t]));
    }
  }
  for (unsigned t = 0; t < 96; ++t)
    CHECK(block[t] == doctest::Approx(total).epsilon(1e-14));
}

TEST_CASE("host_launch: mismatched barriers are a deadlock error, not a hang") {
  CHECK_THROWS_WITH_AS(dcpp::simt::host_launch(launch_shape{{2, 1, 1}, {64, 1, 1}, 0},
                                               [](host_context& ctx) {
                                                 if (ctx.thread_index().x < 16)
                                                   ctx.sync_warp();
                                                 else
                                                   ctx.sync_block();
                                               }),
                       doctest::Contains("deadlock in block (0, 0, 0): 48 threads wait at a "
                                         "block barrier, 16 at a warp collective"),
                       dcpp::error);
  // Threads that return early count as arrived at a block barrier (as on sm_70+).
  int after = 0;
  dcpp::simt::host_launch(launch_shape{{1, 1, 1}, {64, 1, 1}, 0}, [&](host_context& ctx) {
    if (ctx.thread_index().x % 2 == 0)
      return;
    ctx.sync_block();
    ++after;
  });
  CHECK(after == 32);
}

TEST_CASE("host_launch: errors name the field, value and limit; thread exceptions propagate") {
  auto noop = [](host_context&) {};
  CHECK_THROWS_WITH_AS(dcpp::simt::host_launch(launch_shape{{1, 1, 1}, {2048, 1, 1}, 0}, noop),
                       doctest::Contains("block (2048, 1, 1) must have 1 to 1024 threads"),
                       dcpp::error);
  CHECK_THROWS_WITH_AS(dcpp::simt::host_launch(launch_shape{{0, 1, 1}, {32, 1, 1}, 0}, noop),
                       doctest::Contains("grid (0, 1, 1)"), dcpp::error);
  CHECK_THROWS_WITH_AS(
      dcpp::simt::host_launch(launch_shape{{1, 1, 1}, {32, 1, 1}, 300 * 1024}, noop),
      "launch: 307200 bytes of shared memory exceed the limit 232448", dcpp::error);
  CHECK_THROWS_AS(dcpp::simt::host_launch(launch_shape{{4, 1, 1}, {32, 1, 1}, 64},
                                          [](host_context& ctx) {
                                            (void)ctx.shared_array<double>(9); // 72 > 64 bytes
                                          }),
                  dcpp_test::contract_violation);
  for (unsigned workers : {1u, 2u})
    CHECK_THROWS_WITH_AS(
        dcpp::simt::host_launch(launch_shape{{8, 1, 1}, {64, 1, 1}, 0},
                                [](host_context& ctx) {
                                  ctx.sync_block();
                                  if (ctx.block_index().x == 5 && ctx.thread_index().x == 3)
                                    throw std::runtime_error("thread 3 of block 5");
                                  ctx.sync_block();
                                },
                                {.workers = workers}),
        "thread 3 of block 5", std::runtime_error);
}

namespace {
template <class T>
void check_mma(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  T a[16][16], b[16][8];
  float c[16][8], d[16][8];
  for (auto& row : a)
    for (auto& x : row)
      x = dcpp::from_float<T>(u(rng));
  for (auto& row : b)
    for (auto& x : row)
      x = dcpp::from_float<T>(u(rng));
  for (auto& row : c)
    for (auto& x : row)
      x = u(rng);
  // Two warps, each computing the same product from fragments loaded by the documented layout.
  std::vector<float> out(2 * 16 * 8, 1e30f);
  dcpp::simt::host_launch(launch_shape{{1, 1, 1}, {64, 1, 1}, 0}, [&](host_context& ctx) {
    const unsigned lane = dcpp::simt::lane_of(ctx), warp = dcpp::simt::warp_of(ctx);
    dcpp::simt::mma_a_fragment fa;
    dcpp::simt::mma_b_fragment fb;
    dcpp::simt::mma_accumulator fc;
    for (int r = 0; r < 4; ++r) {
      const auto lo = dcpp::simt::mma_a_coord(lane, 2 * r),
                 hi = dcpp::simt::mma_a_coord(lane, 2 * r + 1);
      fa.x[r] = dcpp::simt::mma_pack(a[lo.row][lo.col], a[hi.row][hi.col]);
    }
    for (int r = 0; r < 2; ++r) {
      const auto lo = dcpp::simt::mma_b_coord(lane, 2 * r),
                 hi = dcpp::simt::mma_b_coord(lane, 2 * r + 1);
      fb.x[r] = dcpp::simt::mma_pack(b[lo.row][lo.col], b[hi.row][hi.col]);
    }
    for (int e = 0; e < 4; ++e) {
      const auto at = dcpp::simt::mma_c_coord(lane, e);
      fc.x[e] = c[at.row][at.col];
    }
    const auto fd = ctx.template mma_m16n8k16<T>(fa, fb, fc);
    for (int e = 0; e < 4; ++e) {
      const auto at = dcpp::simt::mma_c_coord(lane, e);
      out[warp * 128 + static_cast<unsigned>(at.row * 8 + at.col)] = fd.x[e];
    }
  });
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double exact = c[r][n], scale = std::fabs(c[r][n]);
      for (int k = 0; k < 16; ++k) {
        const double term = static_cast<double>(dcpp::to_float(a[r][k])) * dcpp::to_float(b[k][n]);
        exact += term;
        scale += std::fabs(term);
      }
      d[r][n] = static_cast<float>(exact);
      for (unsigned w = 0; w < 2; ++w) // products exact in fp32; 17 roundings of the sum
        REQUIRE(std::fabs(out[w * 128 + static_cast<unsigned>(r * 8 + n)] - exact) <=
                17 * 0x1p-24 * scale);
    }
  (void)d;
}
} // namespace

TEST_CASE("host_launch: the m16n8k16 warp matrix instruction with the documented fragments") {
  // Every element of A and B is held by exactly one (lane, element) of the layout.
  std::vector<int> a_hits(256, 0), b_hits(128, 0), c_hits(128, 0);
  for (unsigned lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 8; ++e) {
      const auto at = dcpp::simt::mma_a_coord(lane, e);
      ++a_hits[static_cast<std::size_t>(at.row * 16 + at.col)];
    }
    for (int e = 0; e < 4; ++e) {
      const auto bt = dcpp::simt::mma_b_coord(lane, e), ct = dcpp::simt::mma_c_coord(lane, e);
      ++b_hits[static_cast<std::size_t>(bt.row * 8 + bt.col)];
      ++c_hits[static_cast<std::size_t>(ct.row * 8 + ct.col)];
    }
  }
  for (auto h : a_hits)
    CHECK(h == 1);
  for (auto h : b_hits)
    CHECK(h == 1);
  for (auto h : c_hits)
    CHECK(h == 1);
  // Spot checks against the PTX ISA table: lane 5 (group 1, index 1) holds A[1][2], A[1][3],
  // A[9][2], A[9][3], A[1][10], ...; B[2][1], B[3][1], B[10][1], B[11][1]; D[1][2], D[1][3],
  // D[9][2], D[9][3].
  CHECK(dcpp::simt::mma_a_coord(5, 0).row == 1);
  CHECK(dcpp::simt::mma_a_coord(5, 1).col == 3);
  CHECK(dcpp::simt::mma_a_coord(5, 2).row == 9);
  CHECK(dcpp::simt::mma_a_coord(5, 4).col == 10);
  CHECK(dcpp::simt::mma_b_coord(5, 3).row == 11);
  CHECK(dcpp::simt::mma_b_coord(5, 3).col == 1);
  CHECK(dcpp::simt::mma_c_coord(5, 3).row == 9);
  CHECK(dcpp::simt::mma_c_coord(5, 3).col == 3);
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    check_mma<dcpp::half>(seed);
    check_mma<dcpp::bfloat16>(seed);
  }
  CHECK_THROWS_AS(dcpp::simt::host_launch(
                      launch_shape{{1, 1, 1}, {16, 1, 1}, 0},
                      [](host_context& ctx) { (void)ctx.mma_m16n8k16<dcpp::half>({}, {}, {}); }),
                  dcpp_test::contract_violation);
}

namespace {
//! Element (r, c) of a 16-bit test matrix: distinct and recognisable values.
std::uint16_t tag(int r, int c) {
  return static_cast<std::uint16_t>(r * 256 + c);
}
std::uint16_t low(std::uint32_t w) {
  return static_cast<std::uint16_t>(w & 0xffffu);
}
std::uint16_t high(std::uint32_t w) {
  return static_cast<std::uint16_t>(w >> 16);
}
} // namespace

TEST_CASE("host_launch: ldmatrix x1/x2/x4 with and without .trans, as the PTX ISA defines it") {
  // A 32 x 24 tile (row stride 24 elements = 48 bytes) in shared memory; lane 8i + r addresses
  // row r of matrix i, here matrix i = rows 8i.., columns 8 (i % 2)... as the test chooses.
  constexpr int rows = 32, cols = 24;
  struct out_t {
    std::uint32_t x1[32][1], x2[32][2], x4[32][4], t1[32][1], t4[32][4];
  } out{};
  auto origin = [](int m) { return std::pair<int, int>{8 * m, 8 * (m % 3)}; }; // matrix m
  dcpp::simt::host_launch(
      launch_shape{{1, 1, 1}, {32, 1, 1}, rows * cols * 2}, [&](host_context& ctx) {
        auto* s = ctx.shared_array<std::uint16_t>(rows * cols);
        const unsigned lane = ctx.thread_index().x;
        for (int i = static_cast<int>(lane); i < rows * cols; i += 32)
          s[i] = tag(i / cols, i % cols);
        ctx.sync_warp();
        const int m = static_cast<int>(lane / 8), r = static_cast<int>(lane % 8);
        const auto [r0, c0] = origin(m);
        const void* row = s + (r0 + r) * cols + c0;
        const auto a = ctx.ldmatrix<1, false>(row);
        const auto b = ctx.ldmatrix<2, false>(row);
        const auto c = ctx.ldmatrix<4, false>(row);
        const auto d = ctx.ldmatrix<1, true>(row);
        const auto e = ctx.ldmatrix<4, true>(row);
        out.x1[lane][0] = a.x[0], out.t1[lane][0] = d.x[0];
        for (int i = 0; i < 2; ++i)
          out.x2[lane][i] = b.x[i];
        for (int i = 0; i < 4; ++i)
          out.x4[lane][i] = c.x[i], out.t4[lane][i] = e.x[i];
      });
  // The ISA's figure: "thread 0 holds (row 0, cols 0-1), thread 1 (row 0, cols 2-3), ... thread
  // 4 (row 1, cols 0-1)": enumerate the matrix's 64 elements in row-major order, two per thread.
  for (int m = 0; m < 4; ++m) {
    const auto [r0, c0] = origin(m);
    for (int element = 0; element < 64; element += 2) {
      const int lane = element / 2, r = element / 8, c = element % 8;
      if (m < 1) {
        CHECK(low(out.x1[lane][m]) == tag(r0 + r, c0 + c));
        CHECK(high(out.x1[lane][m]) == tag(r0 + r, c0 + c + 1));
        // .trans: the same walk over the transposed matrix
        CHECK(low(out.t1[lane][m]) == tag(r0 + c, c0 + r));
        CHECK(high(out.t1[lane][m]) == tag(r0 + c + 1, c0 + r));
      }
      if (m < 2) {
        CHECK(low(out.x2[lane][m]) == tag(r0 + r, c0 + c));
        CHECK(high(out.x2[lane][m]) == tag(r0 + r, c0 + c + 1));
      }
      CHECK(low(out.x4[lane][m]) == tag(r0 + r, c0 + c));
      CHECK(high(out.x4[lane][m]) == tag(r0 + r, c0 + c + 1));
      CHECK(low(out.t4[lane][m]) == tag(r0 + c, c0 + r));
      CHECK(high(out.t4[lane][m]) == tag(r0 + c + 1, c0 + r));
    }
  }
}

TEST_CASE("host_launch: ldmatrix gives the mma fragments (A by x4, B by x2 and x2.trans)") {
  // A 16x16 row-major tile at rows 0.., B stored as N x K (x2: B(k, n) = S[n][k]) and as K x N
  // (x2.trans: B(k, n) = S[k][n]); the loaded registers must hold the elements mma_a_coord and
  // mma_b_coord name.
  constexpr int ld = 24; // padded row stride (elements), 48 bytes
  std::uint32_t fa[32][4], fb[32][2], fbt[32][2];
  dcpp::simt::host_launch(
      launch_shape{{1, 1, 1}, {32, 1, 1}, 3 * 16 * ld * 2}, [&](host_context& ctx) {
        auto* s = ctx.shared_array<std::uint16_t>(3 * 16 * ld);
        const unsigned lane = ctx.thread_index().x;
        for (int i = static_cast<int>(lane); i < 3 * 16 * ld; i += 32)
          s[i] = tag(i / ld, i % ld);
        ctx.sync_warp();
        const int l = static_cast<int>(lane);
        // A: lanes 0-15 rows 0-15 at column 0, lanes 16-31 at column 8
        const auto a = ctx.ldmatrix<4, false>(s + (l % 16) * ld + 8 * (l / 16));
        // B as N x K (rows 16..23 = n, columns = k): lanes 0-7 k 0-7, 8-15 k 8-15
        const auto b = ctx.ldmatrix<2, false>(s + (16 + l % 8) * ld + 8 * ((l / 8) % 2));
        // B as K x N (rows 32..47 = k, columns = n)
        const auto bt = ctx.ldmatrix<2, true>(s + (32 + l % 16) * ld);
        for (int i = 0; i < 4; ++i)
          fa[lane][i] = a.x[i];
        for (int i = 0; i < 2; ++i)
          fb[lane][i] = b.x[i], fbt[lane][i] = bt.x[i];
      });
  for (unsigned lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 8; ++e) {
      const auto at = dcpp::simt::mma_a_coord(lane, e);
      const std::uint32_t w = fa[lane][e / 2];
      CHECK((e % 2 == 0 ? low(w) : high(w)) == tag(at.row, at.col));
    }
    for (int e = 0; e < 4; ++e) {
      const auto bt = dcpp::simt::mma_b_coord(lane, e);
      CHECK((e % 2 == 0 ? low(fb[lane][e / 2]) : high(fb[lane][e / 2])) ==
            tag(16 + bt.col, bt.row));
      CHECK((e % 2 == 0 ? low(fbt[lane][e / 2]) : high(fbt[lane][e / 2])) ==
            tag(32 + bt.row, bt.col));
    }
  }
  // a misaligned row address of a used lane is a contract violation
  CHECK_THROWS_AS(dcpp::simt::host_launch(launch_shape{{1, 1, 1}, {32, 1, 1}, 64},
                                          [](host_context& ctx) {
                                            auto* s = ctx.shared_array<std::uint16_t>(32);
                                            (void)ctx.ldmatrix<1, false>(s + 1);
                                          }),
                  dcpp_test::contract_violation);
}

TEST_CASE("host_launch: cp.async copies land at the wait that covers their group") {
  std::vector<std::uint32_t> global(64);
  std::iota(global.begin(), global.end(), 1000u);
  std::vector<std::uint32_t> seen(6 * 4);
  dcpp::simt::host_launch(launch_shape{{1, 1, 1}, {1, 1, 1}, 4 * 16}, [&](host_context& ctx) {
    auto* s = ctx.shared_array<std::uint32_t>(16);
    for (int i = 0; i < 16; ++i)
      s[i] = 7;
    ctx.cp_async_16(s, global.data(), true); // group 0
    ctx.cp_async_commit();
    ctx.cp_async_16(s + 4, global.data() + 4, true);  // group 1
    ctx.cp_async_16(s + 8, global.data() + 8, false); // group 1, zero fill
    ctx.cp_async_commit();
    ctx.cp_async_16(s + 12, global.data() + 12, true); // not committed yet
    seen[0] = s[0];                                    // nothing landed: 7
    ctx.cp_async_wait<1>();                            // group 0 complete
    seen[1] = s[0], seen[2] = s[4];
    ctx.cp_async_wait<0>(); // group 1 complete, the uncommitted copy still pending
    seen[3] = s[4], seen[4] = s[8], seen[5] = s[12];
    ctx.cp_async_commit();
    ctx.cp_async_wait<0>();
    seen[6] = s[12], seen[7] = s[15];
  });
  CHECK(seen[0] == 7);
  CHECK(seen[1] == 1000);
  CHECK(seen[2] == 7);
  CHECK(seen[3] == 1004);
  CHECK(seen[4] == 0);
  CHECK(seen[5] == 7);
  CHECK(seen[6] == 1012);
  CHECK(seen[7] == 1015);
  // misaligned addresses are contract violations (the device faults)
  CHECK_THROWS_AS(dcpp::simt::host_launch(launch_shape{{1, 1, 1}, {1, 1, 1}, 64},
                                          [&](host_context& ctx) {
                                            auto* s = ctx.shared_array<std::uint32_t>(16);
                                            ctx.cp_async_16(s, global.data() + 1, true);
                                          }),
                  dcpp_test::contract_violation);
}
