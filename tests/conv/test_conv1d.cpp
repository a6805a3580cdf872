// Tests for kernels/dcpp/kernels/conv/causal_conv1d.hpp (run through the host launcher) and
// include/dcpp/conv/conv1d.hpp: varlen forward/backward against fp64, shape padding, and the CP
// halo path on 1-8 local ranks against the unsplit sequences.
#include "../support.hpp"

#include <cstdint>
#include <random>
#include <vector>

#include "conv_reference.hpp"
#include "dcpp/comm/local.hpp"

namespace {

using dcpp_test::conv::value_at;

template <class T>
struct varlen_case {
  std::vector<std::int32_t> cu;
  std::int64_t tokens = 0;
  int channels = 0, width = 0;
  bool silu = false;
  std::vector<T> x, w, b, dy;
};

template <class T>
varlen_case<T> make_case(std::uint64_t seed, int channels, int width, bool silu) {
  std::mt19937_64 rng(seed);
  varlen_case<T> v;
  v.channels = channels, v.width = width, v.silu = silu;
  v.cu = {0};
  for (int len : {1, 2, 3, 63, 64, 65, 150, 7})
    v.cu.push_back(v.cu.back() + len + static_cast<int>(rng() % 3));
  v.tokens = v.cu.back() + 5; // rows after the last sequence
  for (std::int64_t i = 0; i < v.tokens * channels; ++i) {
    v.x.push_back(value_at<T>(static_cast<std::int64_t>(seed), i, 0, 11));
    v.dy.push_back(value_at<T>(static_cast<std::int64_t>(seed), i, 1, 13));
  }
  for (int i = 0; i < channels * width; ++i)
    v.w.push_back(value_at<T>(static_cast<std::int64_t>(seed), i, 2, 17));
  for (int c = 0; c < channels; ++c)
    v.b.push_back(value_at<T>(static_cast<std::int64_t>(seed), c, 3, 19));
  return v;
}

struct outputs {
  std::vector<float> y, dx, dw, db; // as float, for comparisons
};

template <class T>
outputs run(const varlen_case<T>& v, const dcpp::conv1d_layout& layout, std::vector<T> x,
            std::vector<T> dy) {
  std::vector<T> y(x.size(), dcpp::from_float<T>(55.0f)), dx(x.size(), dcpp::from_float<T>(55.0f));
  std::vector<float> dw(v.w.size(), 55.0f), db(v.b.size(), 55.0f);
  dcpp::kernels::conv1d_params<T> p;
  p.x = x.data(), p.weight = v.w.data(), p.bias = v.b.data(), p.y = y.data(), p.dy = dy.data();
  p.dx = dx.data(), p.dweight = dw.data(), p.dbias = db.data();
  p.tokens = layout.tokens, p.channels = v.channels, p.silu = v.silu;
  dcpp::conv1d_forward_on_host(v.width, p, layout, {.workers = 2});
  dcpp::conv1d_backward_on_host(v.width, p, layout, nullptr, {.workers = 2});
  outputs o;
  for (auto e : y)
    o.y.push_back(dcpp::to_float(e));
  for (auto e : dx)
    o.dx.push_back(dcpp::to_float(e));
  o.dw = dw, o.db = db;
  return o;
}

template <class T>
void check_varlen(std::uint64_t seed, int channels, int width, bool silu) {
  const auto v = make_case<T>(seed, channels, width, silu);
  const auto layout = dcpp::conv1d_layout::from_cu_seqlens(v.cu, v.tokens);
  const outputs o = run(v, layout, v.x, v.dy);
  std::vector<double> dw(v.w.size(), 0), dw_scale(v.w.size(), 0), db(v.b.size(), 0),
      db_scale(v.b.size(), 0);
  for (std::size_t s = 0; s + 1 < v.cu.size(); ++s) {
    const std::int64_t begin = v.cu[s], length = v.cu[s + 1] - v.cu[s];
    const std::vector<T> xs(v.x.begin() + begin * channels,
                            v.x.begin() + (begin + length) * channels),
        dys(v.dy.begin() + begin * channels, v.dy.begin() + (begin + length) * channels);
    const auto r =
        dcpp_test::conv::reference_conv(xs, v.w, v.b, dys, length, channels, width, silu);
    for (std::int64_t i = 0; i < length * channels; ++i) {
      const auto at = static_cast<std::size_t>(begin * channels + i),
                 ri = static_cast<std::size_t>(i);
      REQUIRE(std::fabs(o.y[at] - r.y[ri]) <=
              dcpp_test::conv::tolerance<T>(r.y[ri], r.y_scale[ri]));
      INFO("sequence ", s, " element ", i, " dx ", o.dx[at], " ref ", r.dx[ri], " scale ",
           r.dx_scale[ri]);
      REQUIRE(std::fabs(o.dx[at] - r.dx[ri]) <=
              dcpp_test::conv::tolerance<T>(r.dx[ri], r.dx_scale[ri]));
    }
    for (std::size_t k = 0; k < dw.size(); ++k)
      dw[k] += r.dw[k], dw_scale[k] += r.dw_scale[k];
    for (std::size_t c = 0; c < db.size(); ++c)
      db[c] += r.db[c], db_scale[c] += r.db_scale[c];
  }
  for (std::int64_t i = v.cu.back() * channels; i < v.tokens * channels; ++i) // outside: zero
    REQUIRE(
        (o.y[static_cast<std::size_t>(i)] == 0.0f && o.dx[static_cast<std::size_t>(i)] == 0.0f));
  // Sums over <= 400 tokens: 16 per thread, 4 groups, ~7 blocks, each term a few ulps.
  const double bound = 64 * 0x1p-24;
  for (std::size_t k = 0; k < dw.size(); ++k)
    REQUIRE(std::fabs(o.dw[k] - dw[k]) <= bound * dw_scale[k]);
  for (std::size_t c = 0; c < db.size(); ++c)
    REQUIRE(std::fabs(o.db[c] - db[c]) <= bound * db_scale[c]);
}

} // namespace

TEST_CASE("conv1d: varlen forward and backward match fp64, every type, width, vector width") {
  std::uint64_t seed = 1;
  for (int width : {2, 3, 4})
    for (int channels : {3, 8, 36, 40}) // 3: scalar; 8, 40: 16-byte vectors (4 fp32 or 8 fp16/bf16
                                        // channels); 36: fp32 vectors, scalar 16-bit
      for (bool silu : {false, true}) {
        CAPTURE(width);
        CAPTURE(channels);
        CAPTURE(silu);
        check_varlen<float>(seed++, channels, width, silu);
        check_varlen<dcpp::half>(seed++, channels, width, silu);
        check_varlen<dcpp::bfloat16>(seed++, channels, width, silu);
      }
}

TEST_CASE("conv1d: shape padding gives the same outputs bit for bit, padding stripped") {
  for (std::int64_t alignment : {64, 4096}) {
    const auto v = make_case<float>(99, 8, 4, true);
    const auto plain = dcpp::conv1d_layout::from_cu_seqlens(v.cu, v.tokens);
    const outputs a = run(v, plain, v.x, v.dy);
    const std::int64_t padded = dcpp::aligned_tokens(v.tokens, alignment);
    CHECK(padded % alignment == 0);
    const auto layout = dcpp::pad_layout(plain, padded);
    CHECK(layout.segments() == plain.segments() + 1); // the padding is its own segment
    std::vector<float> x = v.x, dy = v.dy;
    x.resize(static_cast<std::size_t>(padded * 8), 9.0f); // garbage no tap may read
    dy.resize(x.size(), -9.0f);
    const outputs b = run(v, layout, x, dy);
    for (std::size_t i = 0; i < a.y.size(); ++i) {
      REQUIRE(a.y[i] == b.y[i]);
      REQUIRE(a.dx[i] == b.dx[i]);
    }
    for (std::size_t i = a.y.size(); i < b.y.size(); ++i)
      REQUIRE((b.y[i] == 0.0f && b.dx[i] == 0.0f));
    CHECK(a.dw == b.dw);
    CHECK(a.db == b.db);
  }
  CHECK_THROWS_WITH_AS((void)dcpp::aligned_tokens(10, 0), "conv1d: alignment = 0 must be >= 1",
                       dcpp::error);
  CHECK(dcpp::aligned_tokens(0, 4096) == 4096);
}

TEST_CASE("conv1d: the CP halo path equals the unsplit conv, cp 1 to 8") {
  // Lengths include samples whose chunks are shorter than W-1 (5 on cp 8: chunks of 1 token).
  const std::vector<std::int64_t> lengths{1, 5, 2, 37, 100, 16, 3};
  for (int cp = 1; cp <= 8; ++cp)
    for (int width : {2, 4}) {
      CAPTURE(cp);
      CAPTURE(width);
      REQUIRE_NOTHROW(dcpp::run_local(cp, [&](dcpp::local_communicator& c) {
        dcpp_test::conv::check_cp<dcpp::local_communicator, float>(c, lengths, 8, width,
                                                                   cp % 2 == 0, 5);
        dcpp_test::conv::check_cp<dcpp::local_communicator, dcpp::bfloat16>(c, lengths, 3, width,
                                                                            true, 6);
      }));
    }
  dcpp::run_local(3, [&](dcpp::local_communicator& c) {
    dcpp_test::conv::check_cp<dcpp::local_communicator, dcpp::half>(c, lengths, 5, 3, true, 7);
  });
}

TEST_CASE("conv1d: bad inputs name the field, value and limit") {
  const std::vector<std::int32_t> decreasing{0, 5, 3};
  CHECK_THROWS_WITH_AS(dcpp::conv1d_layout::from_cu_seqlens(decreasing, 10),
                       "conv1d: cu_seqlens[2] = 3 is below cu_seqlens[1] = 5", dcpp::error);
  const std::vector<std::int32_t> too_long{0, 12};
  CHECK_THROWS_WITH_AS(dcpp::conv1d_layout::from_cu_seqlens(too_long, 10),
                       "conv1d: cu_seqlens ends at 12, past the 10 tokens of the buffer",
                       dcpp::error);
  const auto layout = dcpp::conv1d_layout::from_cu_seqlens(std::vector<std::int32_t>{0, 4}, 4);
  std::vector<float> x(8), w(8), y(8);
  dcpp::kernels::conv1d_params<float> p;
  p.x = x.data(), p.weight = w.data(), p.y = y.data(), p.tokens = 4, p.channels = 2;
  CHECK_THROWS_WITH_AS(dcpp::conv1d_forward_on_host(5, p, layout),
                       "conv1d: width = 5 must be 2, 3 or 4", dcpp::error);
  p.tokens = 3;
  CHECK_THROWS_WITH_AS(dcpp::conv1d_forward_on_host(4, p, layout),
                       "conv1d: tokens = 3 differs from the layout's 4", dcpp::error);
  CHECK_THROWS_WITH_AS(dcpp::pad_layout(layout, 2),
                       "conv1d: padded_tokens = 2 is below the 4 tokens of the buffer",
                       dcpp::error);
  // in place (or partly overlapping) would race on a GPU: refused
  p.tokens = 4;
  p.y = x.data() + 1;
  CHECK_THROWS_WITH_AS(dcpp::conv1d_forward_on_host(4, p, layout),
                       "conv1d: y overlaps x; the forward reads neighbouring tokens of x while "
                       "writing y, so it cannot run in place",
                       dcpp::error);
  std::vector<float> dy(8), dw(8);
  p.y = y.data(), p.dy = dy.data(), p.dx = dy.data(), p.dweight = dw.data();
  CHECK_THROWS_WITH_AS(dcpp::conv1d_backward_on_host(4, p, layout),
                       doctest::Contains("conv1d: dx overlaps dy"), dcpp::error);
  p.dx = x.data();
  CHECK_THROWS_WITH_AS(dcpp::conv1d_backward_on_host(4, p, layout),
                       doctest::Contains("conv1d: dx overlaps x"), dcpp::error);
}
