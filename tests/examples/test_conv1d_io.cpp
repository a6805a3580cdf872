// Tests the conv1d_io example end to end: .npy inputs written here, the program run with CP and
// shape padding, its .npy outputs compared with the fp64 reference of each sequence.
#include "../support.hpp"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "../conv/conv_reference.hpp"
#include "dcpp/io/npy.hpp"

namespace {
std::string program() {
  const char* p = std::getenv("DCPP_CONV1D_IO");
  REQUIRE(p != nullptr);
  return p;
}

template <class T>
void check_run(const std::string& descr, int cp, int align, bool silu, int width) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("dcpp_conv1d_io_{}_{}_{}_{}", descr[2], cp, align, width);
  std::filesystem::create_directories(dir);
  const std::vector<std::int32_t> cu{0, 1, 6, 40, 41, 120};
  const int channels = 6;
  const std::int64_t tokens = cu.back();
  std::vector<T> x, dy, w, b;
  for (std::int64_t i = 0; i < tokens * channels; ++i) {
    x.push_back(dcpp_test::conv::value_at<T>(1, i, 0, 3));
    dy.push_back(dcpp_test::conv::value_at<T>(2, i, 0, 3));
  }
  for (int i = 0; i < channels * width; ++i)
    w.push_back(dcpp_test::conv::value_at<T>(3, i, 0, 3));
  for (int c = 0; c < channels; ++c)
    b.push_back(dcpp_test::conv::value_at<T>(4, c, 0, 3));
  dcpp::write_npy((dir / "x.npy").string(), descr, {tokens, channels}, x);
  dcpp::write_npy((dir / "dy.npy").string(), descr, {tokens, channels}, dy);
  dcpp::write_npy((dir / "w.npy").string(), descr, {channels, width}, w);
  dcpp::write_npy((dir / "b.npy").string(), descr, {channels}, b);
  dcpp::write_npy((dir / "cu.npy").string(), "<i4", {static_cast<std::int64_t>(cu.size())}, cu);
  const std::string cmd = fmt::format(
      "{} --x {}/x.npy --w {}/w.npy --b {}/b.npy --cu-seqlens {}/cu.npy --dy {}/dy.npy --cp {} "
      "--align {} {} --out-dir {}/out > /dev/null",
      program(), dir.string(), dir.string(), dir.string(), dir.string(), dir.string(), cp, align,
      silu ? "--silu" : "", dir.string());
  REQUIRE(std::system(cmd.c_str()) == 0);
  const auto y = dcpp::read_npy((dir / "out/y.npy").string());
  const auto dx = dcpp::read_npy((dir / "out/dx.npy").string());
  const auto dw = dcpp::read_npy((dir / "out/dw.npy").string()).as<double>("dw");
  const auto db = dcpp::read_npy((dir / "out/db.npy").string()).as<double>("db");
  CHECK(y.descr == descr);
  CHECK(y.shape == std::vector<std::int64_t>{tokens, channels});
  const auto yv = y.as<double>("y"), dxv = dx.as<double>("dx");
  std::vector<double> dw_ref(dw.size()), dw_scale(dw.size()), db_ref(db.size()),
      db_scale(db.size());
  for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
    const std::int64_t begin = cu[s], length = cu[s + 1] - cu[s];
    const std::vector<T> xs(x.begin() + begin * channels, x.begin() + (begin + length) * channels),
        dys(dy.begin() + begin * channels, dy.begin() + (begin + length) * channels);
    const auto r = dcpp_test::conv::reference_conv(xs, w, b, dys, length, channels, width, silu);
    for (std::int64_t i = 0; i < length * channels; ++i) {
      const auto at = static_cast<std::size_t>(begin * channels + i),
                 ri = static_cast<std::size_t>(i);
      REQUIRE(std::fabs(yv[at] - r.y[ri]) <= dcpp_test::conv::tolerance<T>(r.y[ri], r.y_scale[ri]));
      REQUIRE(std::fabs(dxv[at] - r.dx[ri]) <=
              dcpp_test::conv::tolerance<T>(r.dx[ri], r.dx_scale[ri]));
    }
    for (std::size_t k = 0; k < dw.size(); ++k)
      dw_ref[k] += r.dw[k], dw_scale[k] += r.dw_scale[k];
    for (std::size_t c = 0; c < db.size(); ++c)
      db_ref[c] += r.db[c], db_scale[c] += r.db_scale[c];
  }
  for (std::size_t k = 0; k < dw.size(); ++k)
    CHECK(std::fabs(dw[k] - dw_ref[k]) <= 128 * 0x1p-24 * dw_scale[k]);
  for (std::size_t c = 0; c < db.size(); ++c)
    CHECK(std::fabs(db[c] - db_ref[c]) <= 128 * 0x1p-24 * db_scale[c]);
  std::filesystem::remove_all(dir);
}
} // namespace

TEST_CASE("conv1d_io: outputs equal the fp64 reference, with CP and shape padding") {
  check_run<float>("<f4", 1, 1, false, 4);
  check_run<float>("<f4", 3, 64, true, 3);
  check_run<float>("<f4", 4, 1, true, 2);
  check_run<dcpp::half>("<f2", 2, 16, true, 4);
}

TEST_CASE("conv1d_io: a wrong weight shape is a one-line error naming the shapes") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_conv1d_io_bad";
  std::filesystem::create_directories(dir);
  dcpp::write_npy((dir / "x.npy").string(), "<f4", {4, 2}, std::vector<float>(8, 1.0f));
  dcpp::write_npy((dir / "w.npy").string(), "<f4", {3, 4}, std::vector<float>(12, 1.0f));
  dcpp::write_npy((dir / "cu.npy").string(), "<i4", {2}, std::vector<std::int32_t>{0, 4});
  const std::string cmd =
      fmt::format("{} --x {}/x.npy --w {}/w.npy --cu-seqlens {}/cu.npy "
                  "--out-dir {}/out 2> {}/err.txt",
                  program(), dir.string(), dir.string(), dir.string(), dir.string(), dir.string());
  CHECK(std::system(cmd.c_str()) != 0);
  std::ifstream err(dir / "err.txt");
  std::string line;
  std::getline(err, line);
  CHECK(line == "conv1d_io: --w has shape [3, 4]; expected [2, W] with W in 2..4");
  CHECK(!std::filesystem::exists(dir / "out" / "y.npy"));
  std::filesystem::remove_all(dir);
}
