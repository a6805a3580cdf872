// Tests the ring_attention_io example end to end: .npy inputs written here, the program run for
// cp 1/2/4 with and without dO, its .npy outputs compared with the fp64 reference; bad inputs
// give one-line errors and a non-zero exit.
#include "../support.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../attention/attention_reference.hpp"
#include "dcpp/io/npy.hpp"

namespace {

std::string program() {
  const char* p = std::getenv("DCPP_RING_ATTENTION_IO");
  REQUIRE(p != nullptr);
  return p;
}

double max_error(const std::vector<double>& got, const std::vector<double>& want, bool relative) {
  double err = 0, scale = 1e-30;
  for (const double w : want)
    scale = std::max(scale, std::abs(w));
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    err = std::max(err, std::abs(got[i] - want[i]));
  return relative ? err / scale : err;
}

template <class T>
void check_run(const std::string& descr, int cp, bool backward, int dim = 64, int vdim = 64) {
  using dcpp_test::attention::tolerance;
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("dcpp_ring_attention_io_{}_{}_{}_{}", descr[2], cp, backward, vdim);
  std::filesystem::create_directories(dir);
  const auto b = dcpp_test::attention::make_batch<T>(41 + cp, {1, 30, 70, 2}, 4, 2, dim, vdim);
  const auto ref = dcpp_test::attention::attend(b);
  const std::int64_t n = b.tokens();
  const auto p = [&](const char* name) { return (dir / name).string(); };
  dcpp::write_npy(p("q.npy"), descr, {n, 4, dim}, b.q);
  dcpp::write_npy(p("k.npy"), descr, {n, 2, dim}, b.k);
  dcpp::write_npy(p("v.npy"), descr, {n, 2, vdim}, b.v);
  dcpp::write_npy(p("do.npy"), descr, {n, 4, vdim}, b.dout);
  dcpp::write_npy(p("cu.npy"), "<i4", {static_cast<std::int64_t>(b.cu.size())}, b.cu);
  const std::string cmd =
      fmt::format("{} --q {} --k {} --v {} --cu-seqlens {} --cp {} {} --out-dir {} > /dev/null",
                  program(), p("q.npy"), p("k.npy"), p("v.npy"), p("cu.npy"), cp,
                  backward ? "--dout " + p("do.npy") : std::string(), p("out"));
  REQUIRE(std::system(cmd.c_str()) == 0);
  const dcpp::npy_array o = dcpp::read_npy(p("out/o.npy"));
  CHECK(o.descr == descr);
  CHECK(o.shape == std::vector<std::int64_t>{n, 4, vdim}); // o follows V's head dim
  CHECK(max_error(o.as<double>("o"), ref.o, true) <= tolerance<T>::o);
  const dcpp::npy_array lse = dcpp::read_npy(p("out/lse.npy"));
  CHECK(lse.shape == std::vector<std::int64_t>{n, 4});
  CHECK(max_error(lse.as<double>("lse"), ref.lse, false) <= tolerance<T>::lse);
  CHECK(std::filesystem::exists(p("out/dq.npy")) == backward);
  if (backward) {
    CHECK(max_error(dcpp::read_npy(p("out/dq.npy")).template as<double>("dq"), ref.dq, true) <=
          tolerance<T>::grad);
    const dcpp::npy_array dk = dcpp::read_npy(p("out/dk.npy"));
    CHECK(dk.shape == std::vector<std::int64_t>{n, 2, dim});
    CHECK(max_error(dk.as<double>("dk"), ref.dk, true) <= tolerance<T>::grad);
    const dcpp::npy_array dv = dcpp::read_npy(p("out/dv.npy"));
    CHECK(dv.shape == std::vector<std::int64_t>{n, 2, vdim});
    CHECK(max_error(dv.as<double>("dv"), ref.dv, true) <= tolerance<T>::grad);
  }
  std::filesystem::remove_all(dir);
}

//! Runs the program with `args`, returns (exit status, stderr).
std::pair<int, std::string> run_args(const std::string& args) {
  const auto err = std::filesystem::temp_directory_path() / "dcpp_ring_attention_io_err.txt";
  const int rc = std::system(fmt::format("{} {} 2> {}", program(), args, err.string()).c_str());
  std::ifstream in(err);
  std::stringstream s;
  s << in.rdbuf();
  return {rc, s.str()};
}

} // namespace

TEST_CASE("ring_attention_io: outputs equal fp64 attention") {
  check_run<float>("<f4", 1, true);
  check_run<float>("<f4", 4, true);
  check_run<dcpp::half>("<f2", 2, true);
  check_run<float>("<f4", 2, true, 192, 128); // MLA: o and dv follow V's head dim
  check_run<dcpp::half>("<f2", 4, false);
}

TEST_CASE("ring_attention_io: bad input is a one-line error") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_ring_attention_io_bad";
  std::filesystem::create_directories(dir);
  const auto p = [&](const char* name) { return (dir / name).string(); };
  const std::vector<float> q(10 * 3 * 64, 0.5f), k(10 * 2 * 64, 0.25f), q32(10 * 2 * 32, 0.5f);
  dcpp::write_npy(p("q.npy"), "<f4", {10, 3, 64}, q);
  dcpp::write_npy(p("k.npy"), "<f4", {10, 2, 64}, k);
  dcpp::write_npy(p("q32.npy"), "<f4", {10, 2, 32}, q32);
  dcpp::write_npy(p("cu.npy"), "<i4", {3}, std::vector<std::int32_t>{0, 4, 10});
  dcpp::write_npy(p("cu_short.npy"), "<i4", {3}, std::vector<std::int32_t>{0, 4, 9});
  dcpp::write_npy(p("cu64.npy"), "<i8", {3}, std::vector<std::int64_t>{0, 4, 10});
  const std::string kv = fmt::format("--k {0} --v {0}", p("k.npy"));
  auto [rc, err] = run_args(fmt::format("--q {} {} --cu-seqlens {}", p("q.npy"), kv, p("cu.npy")));
  CHECK(rc != 0);
  CHECK(err == "ring_attention_io: --q has 3 heads, not a multiple of the 2 heads of --k\n");
  std::tie(rc, err) =
      run_args(fmt::format("--q {0} --k {0} --v {0} --cu-seqlens {1}", p("q32.npy"), p("cu.npy")));
  CHECK(rc != 0);
  CHECK(err == "ring_attention_io: head_dim = 32; dcpp's kernels take 64, 96, 128, 192 or 256 "
               "(and 192 with a V head dim of 128)\n");
  std::tie(rc, err) = run_args(
      fmt::format("--q {0} --k {0} --v {0} --cu-seqlens {1}", p("k.npy"), p("cu_short.npy")));
  CHECK(rc != 0);
  CHECK(err == "ring_attention_io: --cu-seqlens must run from 0 to the 10 tokens of --q\n");
  std::tie(rc, err) =
      run_args(fmt::format("--q {0} --k {0} --v {0} --cu-seqlens {1}", p("k.npy"), p("cu64.npy")));
  CHECK(rc != 0);
  CHECK(err == "ring_attention_io: --cu-seqlens has dtype <i8; expected int32\n");
  std::tie(rc, err) = run_args(fmt::format("--q {0} --k {0} --v {0} --cu-seqlens {1} --dout {2}",
                                           p("k.npy"), p("cu.npy"), p("q.npy")));
  CHECK(rc != 0);
  CHECK(err == "ring_attention_io: --dout must be [10, 2, 64] (tokens, heads of --q, head dim of "
               "--v)\n");
  // a V head dim that the kernels do not pair with Q/K's 64
  std::tie(rc, err) = run_args(fmt::format("--q {0} --k {0} --v {1} --cu-seqlens {2}", p("k.npy"),
                                           p("q32.npy"), p("cu.npy")));
  CHECK(rc != 0);
  CHECK(err == "ring_attention_io: head_dim = 64 with v_head_dim = 32; dcpp's kernels take equal "
               "head dims of 64, 96, 128, 192 or 256, or 192 with 128 (MLA)\n");
  std::filesystem::remove_all(dir);
}
