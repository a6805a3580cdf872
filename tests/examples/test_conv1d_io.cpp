// Tests the conv1d_io example end to end: .npy inputs written here, the program run with CP and
// shape padding, its .npy outputs compared with the fp64 reference of each sequence.
#include "../support.hpp"

#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../conv/conv_reference.hpp"
#include "dcpp/io/npy.hpp"

namespace {
std::string program() {
  const char* p = std::getenv("DCPP_CONV1D_IO");
  REQUIRE(p != nullptr);
  return p;
}

//! got matches the reference value `want` within the bound of its terms' scale; a NaN reference
//! wants NaN; a NaN scale (the bound saw a NaN term the value does not depend on: without SiLU,
//! dx = W^T dy does not read x) falls back to the scale of W terms of values in [-1, 1].
template <class T>
bool agrees(double got, double want, double scale) {
  if (std::isnan(want))
    return std::isnan(got);
  if (std::isnan(scale))
    scale = 8.0;
  return std::fabs(got - want) <= dcpp_test::conv::tolerance<T>(want, scale);
}

template <class T>
void check_run(const std::string& descr, int cp, int align, bool silu, int width,
               std::int64_t nan_element = -1) {
  const auto dir =
      std::filesystem::temp_directory_path() /
      fmt::format("dcpp_conv1d_io_{}_{}_{}_{}_{}", descr[2], cp, align, width, nan_element);
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
  if (nan_element >= 0) // a NaN must reach exactly the outputs that depend on it
    x[static_cast<std::size_t>(nan_element)] =
        dcpp::from_float<T>(std::numeric_limits<float>::quiet_NaN());
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
      CAPTURE(at);
      REQUIRE(agrees<T>(yv[at], r.y[ri], r.y_scale[ri]));
      REQUIRE(agrees<T>(dxv[at], r.dx[ri], r.dx_scale[ri]));
    }
    for (std::size_t k = 0; k < dw.size(); ++k)
      dw_ref[k] += r.dw[k], dw_scale[k] += r.dw_scale[k];
    for (std::size_t c = 0; c < db.size(); ++c)
      db_ref[c] += r.db[c], db_scale[c] += r.db_scale[c];
  }
  const auto sum_agrees = [](double got, double want, double scale) {
    if (std::isnan(want))
      return std::isnan(got);
    // a NaN in x makes the bound's scale NaN where the value itself does not depend on x
    // (without SiLU, dB = sum dy): bound it by the values' range then
    return std::fabs(got - want) <= 128 * 0x1p-24 * (std::isnan(scale) ? 1e3 : scale);
  };
  for (std::size_t k = 0; k < dw.size(); ++k) {
    INFO(fmt::format("cp {} dw[{}] = {}, reference {}", cp, k, dw[k], dw_ref[k]));
    CHECK(sum_agrees(dw[k], dw_ref[k], dw_scale[k]));
  }
  for (std::size_t c = 0; c < db.size(); ++c) {
    INFO(fmt::format("cp {} db[{}] = {}, reference {}", cp, c, db[c], db_ref[c]));
    CHECK(sum_agrees(db[c], db_ref[c], db_scale[c]));
  }
  std::filesystem::remove_all(dir);
}
} // namespace

TEST_CASE("conv1d_io: outputs equal the fp64 reference, with CP and shape padding") {
  check_run<float>("<f4", 1, 1, false, 4);
  check_run<float>("<f4", 3, 64, true, 3);
  check_run<float>("<f4", 4, 1, true, 2);
  check_run<dcpp::half>("<f2", 2, 16, true, 4);
}

TEST_CASE("conv1d_io: a NaN in x reaches exactly the outputs that depend on it, at every cp") {
  // x element 43 * 6 + 2: token 43 of the sequence [41, 120), channel 2; its y rows are 43..45
  // (W = 3), its dx rows 41..45 (the chunks cross ranks: the halo carries the NaN), dw and db of
  // channel 2; nothing else, in the other sequences or channels.
  for (const int cp : {1, 2, 3, 4})
    check_run<float>("<f4", cp, 1, cp % 2 == 0, 3, 43 * 6 + 2);
  check_run<float>("<f4", 3, 1, false, 4, 40 * 6 + 5); // the last token of a sequence
}

TEST_CASE("conv1d_io: zero-length sequences, mixed dtypes and failed writes (issue 22)") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_conv1d_io_hostile";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto p = [&](const char* name) { return (dir / name).string(); };
  dcpp::write_npy(p("x.npy"), "<f4", {6, 2}, std::vector<float>(12, 1.0f));
  dcpp::write_npy(p("w.npy"), "<f4", {2, 3}, std::vector<float>(6, 0.5f));
  dcpp::write_npy(p("w2.npy"), "<f2", {2, 3}, std::vector<std::uint16_t>(6, 0x3800));
  dcpp::write_npy(p("cu.npy"), "<i4", {3}, std::vector<std::int32_t>{0, 2, 6});
  dcpp::write_npy(p("cu0.npy"), "<i8", {5}, std::vector<std::int64_t>{0, 0, 2, 2, 6});
  const auto run = [&](const char* w, const char* cu, const std::string& out) {
    const int rc = std::system(fmt::format("{} --x {} --w {} --cu-seqlens {} --cp 2 --out-dir {} "
                                           "> /dev/null 2> {}",
                                           program(), p("x.npy"), p(w), p(cu), out, p("err.txt"))
                                   .c_str());
    return std::pair{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, dcpp::read_file(p("err.txt"), "err")};
  };
  auto [rc, err] = run("w.npy", "cu.npy", p("a"));
  REQUIRE(rc == 0);
  std::tie(rc, err) = run("w.npy", "cu0.npy", p("b"));
  REQUIRE(rc == 0);
  CHECK(dcpp::read_file(p("a/y.npy"), "a") == dcpp::read_file(p("b/y.npy"), "b"));
  std::tie(rc, err) = run("w2.npy", "cu.npy", p("c"));
  CHECK(rc == 1);
  CHECK(err == "conv1d_io: --w has dtype <f2 but --x has <f4: give every float input one dtype\n");
  CHECK_FALSE(std::filesystem::exists(dir / "c")); // the failed run's --out-dir is gone
  dcpp::write_file_atomically(p("file"), "x", "test");
  std::tie(rc, err) = run("w.npy", "cu.npy", p("file") + "/y");
  CHECK(rc == 1);
  CHECK(err == fmt::format("conv1d_io: --out-dir: '{}' is not a directory\n", p("file")));
  // an empty --out-dir (a script's unset variable) wrote /y.npy, at the root
  std::tie(rc, err) = run("w.npy", "cu.npy", "''");
  CHECK(rc != 0);
  CHECK(err.find("--out-dir: '' is an empty path") != std::string::npos);
  // an empty --b was taken for no bias
  rc = std::system(fmt::format("{} --x {} --w {} --cu-seqlens {} --b '' --out-dir {} 2> {}",
                               program(), p("x.npy"), p("w.npy"), p("cu.npy"), p("d"), p("err.txt"))
                       .c_str());
  CHECK(rc != 0);
  CHECK(dcpp::read_file(p("err.txt"), "err").find("--b: '' is an empty path") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "d"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("conv1d_io: endless inputs end at their first bytes; outputs never replace inputs") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_conv1d_io_endless";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto p = [&](const char* name) { return (dir / name).string(); };
  dcpp::write_npy(p("w.npy"), "<f4", {2, 3}, std::vector<float>(6, 0.5f));
  dcpp::write_npy(p("cu.npy"), "<i4", {3}, std::vector<std::int32_t>{0, 2, 6});
  dcpp::write_npy(p("y.npy"), "<f4", {6, 2}, std::vector<float>(12, 1.0f)); // x, named y.npy
  const std::string x = dcpp::read_file(p("y.npy"), "x");
  const auto run = [&](const std::string& args) {
    const int rc =
        std::system(fmt::format("{} {} > /dev/null 2> {}", program(), args, p("err.txt")).c_str());
    return std::pair{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, dcpp::read_file(p("err.txt"), "err")};
  };
  // /dev/zero and an endless pipe were read for gigabytes before the magic was looked at
  auto [rc, err] = run(fmt::format("--x /dev/zero --w {} --cu-seqlens {} --out-dir {}", p("w.npy"),
                                   p("cu.npy"), p("out")));
  CHECK(rc == 1);
  CHECK(err == "conv1d_io: /dev/zero: not a .npy file (bad magic)\n");
  REQUIRE(::mkfifo(p("endless.npy").c_str(), 0600) == 0);
  const int yes = std::system(fmt::format("timeout 60 yes > {} &", p("endless.npy")).c_str());
  REQUIRE(yes == 0);
  std::tie(rc, err) = run(fmt::format("--x {} --w {} --cu-seqlens {} --out-dir {}",
                                      p("endless.npy"), p("w.npy"), p("cu.npy"), p("out")));
  CHECK(rc == 1);
  CHECK(err.find("not a .npy file (bad magic)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "out"));
  // --out-dir holding the inputs: y.npy is --x, by another spelling of the same path
  std::tie(rc, err) = run(fmt::format("--x {} --w {} --cu-seqlens {} --out-dir {}/.", p("y.npy"),
                                      p("w.npy"), p("cu.npy"), dir.string()));
  CHECK(rc == 1);
  CHECK(err == fmt::format("conv1d_io: --out-dir: the output '{}/./y.npy' is the input --x '{}': "
                           "writing it would replace the input\n",
                           dir.string(), p("y.npy")));
  CHECK(dcpp::read_file(p("y.npy"), "x") == x);
  // dw.npy of the backward is the input --w
  dcpp::write_npy(p("x.npy"), "<f4", {6, 2}, std::vector<float>(12, 1.0f));
  std::tie(rc, err) = run(fmt::format("--x {} --w {}/dw.npy --dy {} --cu-seqlens {} --out-dir {}",
                                      p("x.npy"), dir.string(), p("x.npy"), p("cu.npy"), p("o2")));
  CHECK(rc == 1); // dw.npy does not exist: a named read error, not a replaced input
  std::filesystem::copy_file(p("w.npy"), p("dw.npy"));
  std::tie(rc, err) =
      run(fmt::format("--x {} --w {} --dy {} --cu-seqlens {} --out-dir {}", p("x.npy"), p("dw.npy"),
                      p("x.npy"), p("cu.npy"), dir.string()));
  CHECK(rc == 1);
  CHECK(err.find("the output '" + dir.string() + "/dw.npy' is the input --w") != std::string::npos);
  CHECK(dcpp::read_file(p("dw.npy"), "w") == dcpp::read_file(p("w.npy"), "w"));
  std::filesystem::remove_all(dir);
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
