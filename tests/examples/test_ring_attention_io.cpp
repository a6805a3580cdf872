// Tests the ring_attention_io example end to end: .npy inputs written here, the program run for
// cp 1/2/4 with and without dO, its .npy outputs compared with the fp64 reference; bad inputs
// give one-line errors and a non-zero exit.
#include "../support.hpp"

#include <sys/wait.h>

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
  const int rc =
      std::system(fmt::format("{} {} > /dev/null 2> {}", program(), args, err.string()).c_str());
  std::ifstream in(err);
  std::stringstream s;
  s << in.rdbuf();
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc), s.str()};
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
  CHECK(err ==
        "ring_attention_io: --cu-seqlens ends at 9; must end at the 10 tokens of the input\n");
  // an output that is an input: o.npy as --v, in the directory named another way
  std::filesystem::copy_file(p("k.npy"), p("o.npy"),
                             std::filesystem::copy_options::overwrite_existing);
  std::tie(rc, err) =
      run_args(fmt::format("--q {0} --k {0} --v {1} --cu-seqlens {2} --out-dir {3}/.", p("k.npy"),
                           p("o.npy"), p("cu.npy"), dir.string()));
  CHECK(rc == 1);
  CHECK(err == fmt::format("ring_attention_io: --out-dir: the output '{}/./o.npy' is the input --v "
                           "'{}': writing it would replace the input\n",
                           dir.string(), p("o.npy")));
  CHECK(dcpp::read_file(p("o.npy"), "o") == dcpp::read_file(p("k.npy"), "k"));
  CHECK(run_args(fmt::format("--q /dev/zero --k {0} --v {0} --cu-seqlens {1}", p("k.npy"),
                             p("cu.npy"))) ==
        std::pair<int, std::string>{1,
                                    "ring_attention_io: /dev/zero: not a .npy file (bad magic)\n"});
  // int64 offsets are accepted (one cu_seqlens rule for both tools)
  std::tie(rc, err) = run_args(fmt::format("--q {0} --k {0} --v {0} --cu-seqlens {1} --out-dir {2}",
                                           p("k.npy"), p("cu64.npy"), p("out64")));
  CHECK(rc == 0);
  CHECK(err.empty());
  std::tie(rc, err) = run_args(fmt::format("--q {0} --k {0} --v {0} --cu-seqlens {1} --dout {2}",
                                           p("k.npy"), p("cu.npy"), p("q.npy")));
  CHECK(rc != 0);
  CHECK(err ==
        "ring_attention_io: --dout has shape [10, 3, 64]; must be [10, 2, 64] (tokens, heads "
        "of --q, head dim of --v)\n");
  // a V head dim that the kernels do not pair with Q/K's 64
  std::tie(rc, err) = run_args(fmt::format("--q {0} --k {0} --v {1} --cu-seqlens {2}", p("k.npy"),
                                           p("q32.npy"), p("cu.npy")));
  CHECK(rc != 0);
  CHECK(err == "ring_attention_io: head_dim = 64 with v_head_dim = 32; dcpp's kernels take equal "
               "head dims of 64, 96, 128, 192 or 256, or 192 with 128 (MLA)\n");
  // an empty path (a script's unset variable): --out-dir '' wrote /o.npy, --dout '' skipped
  // the backward
  for (const char* empty : {"--out-dir", "--dout"}) {
    std::tie(rc, err) = run_args(fmt::format("--q {0} --k {0} --v {0} --cu-seqlens {1} {2} ''",
                                             p("k.npy"), p("cu.npy"), empty));
    CAPTURE(empty);
    CHECK(rc != 0);
    CHECK(err.find(fmt::format("{}: '' is an empty path", empty)) != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("ring_attention_io: hostile inputs and failed writes (issue 22)") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_ring_attention_io_hostile";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto p = [&](const char* name) { return (dir / name).string(); };
  dcpp::write_npy(p("k.npy"), "<f4", {10, 2, 64}, std::vector<float>(10 * 2 * 64, 0.25f));
  dcpp::write_npy(p("k8.npy"), "<f8", {10, 2, 64}, std::vector<double>(10 * 2 * 64, 0.25));
  dcpp::write_npy(p("cu.npy"), "<i4", {3}, std::vector<std::int32_t>{0, 4, 10});
  dcpp::write_npy(p("cu_zero.npy"), "<i4", {4}, std::vector<std::int32_t>{0, 4, 4, 10});
  dcpp::write_npy(p("cu_frac.npy"), "<f4", {3}, std::vector<float>{0.0f, 4.5f, 10.0f});
  dcpp::write_npy(p("cu_2d.npy"), "<i4", {1, 3}, std::vector<std::int32_t>{0, 4, 10});
  const auto args = [&](const char* q, const char* k, const char* cu, const std::string& out) {
    return fmt::format("--q {} --k {} --v {} --cu-seqlens {} --out-dir {}", p(q), p(k), p(k), p(cu),
                       out);
  };
  // mixed dtypes are refused, not converted silently
  auto [rc, err] = run_args(args("k.npy", "k8.npy", "cu.npy", p("out")));
  CHECK(rc == 1);
  CHECK(err == "ring_attention_io: --k has dtype <f8 but --q has <f4: give every float input one "
               "dtype\n");
  // float64 throughout is computed as float32, and says so
  std::tie(rc, err) = run_args(args("k8.npy", "k8.npy", "cu.npy", p("out8")));
  CHECK(rc == 0);
  CHECK(err == "ring_attention_io: note: the inputs are float64; computing and writing float32\n");
  // a scale a float cannot hold: named as given (1e300 was 'rank 0: ring attention: scale =
  // inf must be finite and positive'; 1e-50 was a scale of 0)
  for (const char* scale : {"1e300", "1e-50"}) {
    std::tie(rc, err) = run_args(args("k.npy", "k.npy", "cu.npy", p("out")) + " --scale " + scale);
    CHECK(rc == 105); // CLI11's value check
    CHECK(err.find(fmt::format("--scale: '{}' is not a finite number > 0 within a float "
                               "(1.1754944e-38 to 3.4028235e+38)",
                               scale)) != std::string::npos);
  }
  // fractional and 2-D cu_seqlens are refused; zero-length sequences accepted
  std::tie(rc, err) = run_args(args("k.npy", "k.npy", "cu_frac.npy", p("out")));
  CHECK(err ==
        "ring_attention_io: --cu-seqlens has dtype <f4; expected an integer dtype (<i4 or <i8)\n");
  std::tie(rc, err) = run_args(args("k.npy", "k.npy", "cu_2d.npy", p("out")));
  CHECK(err == "ring_attention_io: --cu-seqlens has shape [1, 3]; expected one dimension "
               "[sequences + 1]\n");
  std::tie(rc, err) = run_args(args("k.npy", "k.npy", "cu_zero.npy", p("out_zero")));
  CHECK(rc == 0);
  const auto o_zero = dcpp::read_npy(p("out_zero/o.npy")).as<float>("o");
  const auto o_plain = dcpp::read_npy(p("out8/o.npy")).as<float>("o");
  CHECK(o_zero == o_plain); // the empty sequence changes nothing
  // a directory as an input, a truncated input: one line, exit 1
  std::tie(rc, err) = run_args(fmt::format("--q {0} --k {1} --v {1} --cu-seqlens {2}", dir.string(),
                                           p("k.npy"), p("cu.npy")));
  CHECK(rc == 1);
  CHECK(err == fmt::format("ring_attention_io: npy input: cannot read '{}': Is a directory\n",
                           dir.string()));
  {
    std::string bytes = dcpp::read_file(p("k.npy"), "k");
    bytes.resize(bytes.size() - 3);
    dcpp::write_file_atomically(p("k_cut.npy"), bytes, "test");
  }
  std::tie(rc, err) = run_args(args("k_cut.npy", "k_cut.npy", "cu.npy", p("out")));
  CHECK(rc == 1);
  CHECK(err == fmt::format("ring_attention_io: {}: holds 5117 bytes of data; its shape [10, 2, 64] "
                           "of dtype <f4 needs 5120\n",
                           p("k_cut.npy")));
  // an --out-dir that cannot be made: a file in the way; nothing is created
  dcpp::write_file_atomically(p("file"), "x", "test");
  std::tie(rc, err) = run_args(args("k.npy", "k.npy", "cu.npy", p("file") + "/sub"));
  CHECK(rc == 1);
  CHECK(err == fmt::format("ring_attention_io: --out-dir: '{}' is not a directory\n", p("file")));
  // all outputs or none: lse.npy cannot be replaced (a directory stands there), so o.npy,
  // written first, must not appear either, and an existing o.npy stays as it was
  std::filesystem::create_directories(dir / "out_fail" / "lse.npy");
  dcpp::write_file_atomically(p("out_fail/o.npy"), "old", "test");
  std::tie(rc, err) = run_args(args("k.npy", "k.npy", "cu.npy", p("out_fail")));
  CHECK(rc == 1);
  CHECK(err.find("cannot write") != std::string::npos);
  CHECK(dcpp::read_file(p("out_fail/o.npy"), "o") == "old");
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir / "out_fail"))
    ++entries;
  CHECK(entries == 2); // o.npy and the lse.npy directory: no temporary file left
  // a failed run removes the --out-dir it created
  std::tie(rc, err) = run_args(args("k.npy", "k8.npy", "cu.npy", p("new/deeper")));
  CHECK(rc == 1);
  CHECK_FALSE(std::filesystem::exists(dir / "new"));
  std::filesystem::remove_all(dir);
}
