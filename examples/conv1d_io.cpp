// conv1d_io: the causal depthwise conv1d on your own data. Reads x [tokens, channels], w
// [channels, W], b [channels], cu_seqlens (int32, real lengths) and optionally dy as .npy, splits
// every sequence in zigzag chunks over --cp ranks (threads, local communicator), runs the halo
// exchange and the kernels' own source through the host launcher, and writes y.npy (and dx.npy,
// dw.npy, db.npy) to --out-dir, in the input's token order. Compare with causal-conv1d or PyTorch.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <dcpp/comm/local.hpp>
#include <dcpp/conv/conv1d.hpp>
#include <dcpp/io/atomic_file.hpp>
#include <dcpp/io/guarded_main.hpp>
#include <dcpp/io/npy.hpp>
#include <dcpp/route/route.hpp>

#include "cli_checks.hpp"

namespace {

struct inputs {
  std::int64_t tokens = 0;
  int channels = 0, width = 0, cp = 1;
  std::int64_t align = 1;
  bool silu = false, backward = false;
  std::vector<std::int64_t> lengths;
  std::vector<std::int64_t> starts; // first row of each sequence in x
};

template <class T>
int run(const inputs& in, const dcpp::npy_array& xa, const dcpp::npy_array& wa,
        const dcpp::npy_array* ba, const dcpp::npy_array* dya, const std::string& out_dir,
        const std::string& descr) {
  const auto x = xa.as<T>("--x");
  const auto w = wa.as<T>("--w");
  const auto b = ba ? ba->as<T>("--b") : std::vector<T>(static_cast<std::size_t>(in.channels));
  const auto dy = dya ? dya->as<T>("--dy") : std::vector<T>{};
  const auto C = static_cast<std::size_t>(in.channels);
  std::vector<T> y(x.size(), dcpp::from_float<T>(0.0f)), dx(x.size(), dcpp::from_float<T>(0.0f));
  std::vector<float> dw(w.size()), db(C);

  // One micro-batch: a single CP group of all --cp ranks runs every sequence.
  dcpp::plan p;
  p.world_size = in.cp;
  p.max_tokens_per_rank = std::int64_t{1} << 40;
  p.lengths = in.lengths;
  p.microbatches.push_back({{{0, in.cp, {}}}});
  for (std::size_t s = 0; s < in.lengths.size(); ++s)
    p.microbatches[0].groups[0].samples.push_back(static_cast<std::int32_t>(s));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(in.cp), 0);
  counts[0] = static_cast<std::int64_t>(in.lengths.size());
  const auto origins = dcpp::sample_origins::from_counts(counts, in.lengths);

  dcpp::run_local(in.cp, [&](dcpp::local_communicator& comm) {
    const dcpp::thd_layout t = dcpp::make_rank_route(p, origins, 0, comm.rank()).layout;
    // This rank's rows, padded to --align rows (shape padding: its own segment).
    const std::int64_t rows = dcpp::aligned_tokens(t.tokens(), in.align);
    const dcpp::conv1d_layout layout =
        dcpp::pad_layout(dcpp::conv1d_layout::from_thd(t, in.width), rows);
    std::vector<T> lx(static_cast<std::size_t>(rows) * C, dcpp::from_float<T>(0.0f)), ldy = lx;
    std::vector<std::int64_t> global_row(static_cast<std::size_t>(rows), -1);
    for (std::size_t i = 0; i + 1 < t.cu_seqlens_padded.size(); ++i) {
      const std::int64_t padded = t.cu_seqlens_padded[i + 1] - t.cu_seqlens_padded[i];
      const std::int64_t base = t.cu_seqlens_padded[i] / in.cp;
      const auto s = static_cast<std::size_t>(t.samples[i]);
      for (std::int64_t j = 0; j < padded / in.cp; ++j) {
        const std::int64_t pos = dcpp::zigzag_position(padded, in.cp, t.rank_in_group, j);
        if (pos >= in.lengths[s])
          continue;
        const std::int64_t g = in.starts[s] + pos, l = base + j;
        global_row[static_cast<std::size_t>(l)] = g;
        std::copy_n(x.begin() + g * in.channels, C, lx.begin() + l * in.channels);
        if (in.backward)
          std::copy_n(dy.begin() + g * in.channels, C, ldy.begin() + l * in.channels);
      }
    }
    const auto plan = dcpp::conv1d_halo_plan::make(t, in.width);
    const auto halo = dcpp::exchange_halo(comm, plan, std::span<const T>(lx), in.channels);
    std::vector<T> ly(lx.size()), ldx(lx.size());
    std::vector<float> halo_dx(static_cast<std::size_t>(layout.halo_rows) * C), ldw(w.size()),
        ldb(C);
    dcpp::kernels::conv1d_params<T> k;
    k.x = lx.data(), k.weight = w.data(), k.bias = b.data(), k.halo_x = halo.data();
    k.y = ly.data(), k.dy = ldy.data(), k.dx = ldx.data(), k.halo_dx = halo_dx.data();
    k.dweight = ldw.data(), k.dbias = ldb.data();
    k.tokens = rows, k.channels = in.channels, k.silu = in.silu;
    dcpp::conv1d_forward_on_host(in.width, k, layout);
    if (in.backward) {
      dcpp::conv1d_halo_gradients_on_host(in.width, k, layout);
      const auto incoming =
          dcpp::collect_halo_gradients(comm, plan, std::span<const float>(halo_dx), in.channels);
      dcpp::conv1d_backward_on_host(in.width, k, layout, &incoming);
      comm.all_reduce(std::span<float>(ldw), dcpp::reduce_op::sum);
      comm.all_reduce(std::span<float>(ldb), dcpp::reduce_op::sum);
      if (comm.rank() == 0)
        dw = ldw, db = ldb;
    }
    for (std::int64_t l = 0; l < rows; ++l) // distinct rows per rank: no two threads write one
      if (const std::int64_t g = global_row[static_cast<std::size_t>(l)]; g >= 0) {
        std::copy_n(ly.begin() + l * in.channels, C, y.begin() + g * in.channels);
        std::copy_n(ldx.begin() + l * in.channels, C, dx.begin() + g * in.channels);
      }
  });
  // all outputs are written in full before any is renamed into place: none or all appear
  const std::vector<std::int64_t> shape{in.tokens, in.channels};
  dcpp::staged_outputs outputs("--out-dir");
  outputs.add(out_dir + "/y.npy", dcpp::npy_bytes(descr, shape, y));
  if (in.backward) {
    outputs.add(out_dir + "/dx.npy", dcpp::npy_bytes(descr, shape, dx));
    outputs.add(out_dir + "/dw.npy", dcpp::npy_bytes("<f4", {in.channels, in.width}, dw));
    outputs.add(out_dir + "/db.npy", dcpp::npy_bytes("<f4", {in.channels}, db));
  }
  outputs.commit();
  fmt::print("conv1d_io: {} sequences, {} tokens, {} channels, W = {}, cp = {}{} -> {}\n",
             in.lengths.size(), in.tokens, in.channels, in.width, in.cp,
             in.backward ? ", forward and backward" : "", out_dir);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Causal depthwise conv1d over packed sequences with CP halo, on .npy files"};
  std::string x_path, w_path, b_path, cu_path, dy_path, out_dir = ".";
  inputs in;
  app.add_option("--x", x_path,
                 "x [tokens, channels], float16, float32 or float64 (computed as float32); w, b "
                 "and dy share its dtype")
      ->required()
      ->check(dcpp_cli::path());
  app.add_option("--w", w_path, "w [channels, W], W in 2..4; w[c,k] multiplies x[t-k,c]")
      ->required()
      ->check(dcpp_cli::path());
  app.add_option("--b", b_path, "b [channels] (default zeros)")->check(dcpp_cli::path());
  app.add_option("--cu-seqlens", cu_path,
                 "cu_seqlens int32 or int64 [sequences + 1], real lengths from 0 to tokens "
                 "(zero-length sequences allowed)")
      ->required()
      ->check(dcpp_cli::path());
  app.add_option("--dy", dy_path, "dy [tokens, channels]: also run the backward")
      ->check(dcpp_cli::path());
  app.add_option("--cp", in.cp, "ranks each sequence is split over (zigzag)")
      ->transform(dcpp_cli::decimal(in.cp))
      ->check(CLI::Range(1, 64));
  app.add_option("--align", in.align, "pad each rank's token rows to a multiple of this")
      ->transform(dcpp_cli::decimal(in.align))
      ->check(CLI::Range(1, 1 << 20));
  app.add_flag("--silu", in.silu, "apply SiLU");
  app.add_option("--out-dir", out_dir, "where y.npy (dx.npy, dw.npy, db.npy) go")
      ->check(dcpp_cli::path());
  CLI11_PARSE(app, argc, argv);
  return dcpp::guarded_main("conv1d_io: ", [&]() -> int {
    std::vector<std::string> outputs{out_dir + "/y.npy"};
    if (!dy_path.empty())
      for (const char* name : {"/dx.npy", "/dw.npy", "/db.npy"})
        outputs.push_back(out_dir + name);
    dcpp::refuse_outputs_over_inputs("--out-dir", outputs,
                                     {{"--x", x_path},
                                      {"--w", w_path},
                                      {"--b", b_path},
                                      {"--cu-seqlens", cu_path},
                                      {"--dy", dy_path}});
    const auto xa = dcpp::read_npy(x_path), wa = dcpp::read_npy(w_path),
               cu = dcpp::read_npy(cu_path);
    dcpp::npy_array ba, dya;
    if (!b_path.empty())
      ba = dcpp::read_npy(b_path);
    if (!dy_path.empty())
      dya = dcpp::read_npy(dy_path), in.backward = true;
    const dcpp::npy_array* bp = b_path.empty() ? nullptr : &ba;
    const dcpp::npy_array* dyp = dy_path.empty() ? nullptr : &dya;
    if (xa.shape.size() != 2 || wa.shape.size() != 2)
      throw dcpp::error(dcpp::status_code::invalid_length,
                        fmt::format("--x must be [tokens, channels] and --w [channels, W]; got {} "
                                    "and {} dimensions",
                                    xa.shape.size(), wa.shape.size()));
    if (xa.shape[0] < 1 || xa.shape[1] < 1 || xa.shape[1] > (1 << 20))
      throw dcpp::error(dcpp::status_code::invalid_length,
                        fmt::format("--x has shape {}; expected at least one token and 1 to {} "
                                    "channels",
                                    xa.shape_text(), 1 << 20));
    in.tokens = xa.shape[0];
    in.channels = static_cast<int>(xa.shape[1]);
    if (wa.shape[0] != in.channels || wa.shape[1] < 2 || wa.shape[1] > 4)
      throw dcpp::error(dcpp::status_code::invalid_length,
                        fmt::format("--w has shape [{}, {}]; expected [{}, W] with W in 2..4",
                                    wa.shape[0], wa.shape[1], in.channels));
    in.width = static_cast<int>(wa.shape[1]);
    const std::string dtype =
        dcpp::common_float_dtype({{"--x", &xa}, {"--w", &wa}, {"--b", bp}, {"--dy", dyp}});
    const auto offsets = dcpp::cu_seqlens_from_npy(cu, in.tokens, "--cu-seqlens");
    for (std::size_t i = 0; i + 1 < offsets.size(); ++i)
      if (offsets[i + 1] > offsets[i]) { // a zero-length sequence holds no row: nothing to run
        in.starts.push_back(offsets[i]);
        in.lengths.push_back(offsets[i + 1] - offsets[i]);
      }
    if (dyp && dya.shape != xa.shape)
      throw dcpp::error(dcpp::status_code::invalid_length,
                        fmt::format("--dy has shape {}; must have the shape {} of --x",
                                    dya.shape_text(), xa.shape_text()));
    if (bp && (ba.shape.size() != 1 || ba.shape[0] != in.channels))
      throw dcpp::error(
          dcpp::status_code::invalid_length,
          fmt::format("--b has shape {}; must be [{}]", ba.shape_text(), in.channels));
    if (dtype == "<f8")
      fmt::print(stderr, "conv1d_io: note: the inputs are float64; computing and writing "
                         "float32\n");
    // the outputs' directory: what this run creates is removed again if it fails
    dcpp::output_directory dir(out_dir, "--out-dir");
    const int status = dtype == "<f2" ? run<dcpp::half>(in, xa, wa, bp, dyp, out_dir, "<f2")
                                      : run<float>(in, xa, wa, bp, dyp, out_dir, "<f4");
    dir.keep();
    return status;
  });
}
