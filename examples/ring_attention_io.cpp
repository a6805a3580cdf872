// ring_attention_io: THD ring attention on your own data. Reads q [tokens, heads, head_dim],
// k [tokens, kv_heads, head_dim] and v [tokens, kv_heads, v_head_dim] and cu_seqlens (int32, real
// lengths) as .npy (and dO for the backward), pads every sequence to a multiple of 2*cp, splits it
// in zigzag chunks over --cp ranks (threads, local communicator), runs the ring with the kernels'
// own source through the host launcher, and writes o.npy and lse.npy (and dq.npy, dk.npy, dv.npy)
// to --out-dir in the input's token order. Causal, scale 1/sqrt(head_dim) unless --scale. Compare
// with PyTorch or FlashAttention (flash_attn_varlen_func returns the same LSE, natural log, [heads,
// tokens]).
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <dcpp/attention/ring.hpp>
#include <dcpp/comm/local.hpp>
#include <dcpp/io/atomic_file.hpp>
#include <dcpp/io/guarded_main.hpp>
#include <dcpp/io/npy.hpp>

#include "cli_checks.hpp"

namespace {

struct inputs {
  std::int64_t tokens = 0;
  int heads = 0, kv_heads = 0, head_dim = 0, v_head_dim = 0, cp = 1;
  float scale = 0.0f;
  bool backward = false;
  std::vector<std::int32_t> cu;
};

//! The .npy bytes of values as `descr` ('<f2' for half, '<f4' otherwise, widening bfloat16 to
//! float32).
template <class T>
std::string npy_values(const std::string& descr, const std::vector<std::int64_t>& shape,
                       const std::vector<T>& values) {
  if constexpr (std::is_same_v<T, dcpp::bfloat16>) {
    std::vector<float> wide(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
      wide[i] = dcpp::to_float(values[i]);
    return dcpp::npy_bytes(descr, shape, wide);
  } else {
    return dcpp::npy_bytes(descr, shape, values);
  }
}

template <class T>
int run(const inputs& in, const dcpp::npy_array& qa, const dcpp::npy_array& ka,
        const dcpp::npy_array& va, const dcpp::npy_array* da, const std::string& out_dir,
        const std::string& descr) {
  const auto q = qa.as<T>("--q"), k = ka.as<T>("--k"), v = va.as<T>("--v");
  const auto dout = da ? da->as<T>("--dout") : std::vector<T>{};
  // q, dq and k, dk follow the Q/K head dim; v, dv, o and dout the V head dim (MLA: 192 and 128)
  const int qw = in.heads * in.head_dim, kw = in.kv_heads * in.head_dim;
  const int ow = in.heads * in.v_head_dim, vw = in.kv_heads * in.v_head_dim;
  const dcpp::attention_shape shape{in.heads, in.kv_heads, in.head_dim, in.scale,
                                    in.v_head_dim == in.head_dim ? 0 : in.v_head_dim};
  std::vector<T> o(static_cast<std::size_t>(in.tokens * ow)), dq(q.size()), dk(k.size()),
      dv(v.size());
  std::vector<float> lse(static_cast<std::size_t>(in.tokens * in.heads));

  dcpp::run_local(in.cp, [&](dcpp::local_communicator& comm) {
    const auto part = dcpp::ring_partition::padded(in.cu, in.cp, comm.rank());
    const auto n = static_cast<std::size_t>(part.tokens());
    std::vector<T> lq(n * qw), lk(n * kw), lv(n * vw), lo(n * ow), ldout, ldq, ldk, ldv;
    std::vector<float> llse(n * in.heads);
    dcpp::partition_gather_on_host<T>(part, q, lq, qw);
    dcpp::partition_gather_on_host<T>(part, k, lk, kw);
    dcpp::partition_gather_on_host<T>(part, v, lv, vw);
    dcpp::ring_attention_forward<dcpp::local_communicator, T>(comm, part, shape, lq, lk, lv, lo,
                                                              llse);
    // Each rank writes its own real rows of the shared outputs (distinct rows per rank).
    dcpp::partition_scatter_on_host<T>(part, lo, o, ow);
    dcpp::partition_scatter_on_host<float>(part, llse, lse, in.heads);
    if (in.backward) {
      ldout.resize(n * ow), ldq.resize(n * qw), ldk.resize(n * kw), ldv.resize(n * vw);
      dcpp::partition_gather_on_host<T>(part, dout, ldout, ow);
      dcpp::ring_attention_backward<dcpp::local_communicator, T>(comm, part, shape, lq, lk, lv, lo,
                                                                 llse, ldout, ldq, ldk, ldv);
      dcpp::partition_scatter_on_host<T>(part, ldq, dq, qw);
      dcpp::partition_scatter_on_host<T>(part, ldk, dk, kw);
      dcpp::partition_scatter_on_host<T>(part, ldv, dv, vw);
    }
  });
  const std::vector<std::int64_t> qshape{in.tokens, in.heads, in.head_dim},
      kshape{in.tokens, in.kv_heads, in.head_dim}, oshape{in.tokens, in.heads, in.v_head_dim},
      vshape{in.tokens, in.kv_heads, in.v_head_dim};
  // all outputs are written in full before any is renamed into place: none or all appear
  dcpp::staged_outputs outputs("--out-dir");
  outputs.add(out_dir + "/o.npy", npy_values(descr, oshape, o));
  outputs.add(out_dir + "/lse.npy", dcpp::npy_bytes("<f4", {in.tokens, in.heads}, lse));
  if (in.backward) {
    outputs.add(out_dir + "/dq.npy", npy_values(descr, qshape, dq));
    outputs.add(out_dir + "/dk.npy", npy_values(descr, kshape, dk));
    outputs.add(out_dir + "/dv.npy", npy_values(descr, vshape, dv));
  }
  outputs.commit();
  fmt::print("ring_attention_io: {} sequences, {} tokens, heads {}/{}, head_dim {}{}, cp = {}{} -> "
             "{}\n",
             in.cu.size() - 1, in.tokens, in.heads, in.kv_heads, in.head_dim,
             in.v_head_dim != in.head_dim ? fmt::format(" (v {})", in.v_head_dim) : "", in.cp,
             in.backward ? ", forward and backward" : "", out_dir);
  return 0;
}

dcpp::error shape_error(const std::string& message) {
  return dcpp::error(dcpp::status_code::invalid_length, message);
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"THD ring attention (causal, zigzag context parallel) on .npy files"};
  std::string q_path, k_path, v_path, cu_path, dout_path, out_dir = ".", dtype = "auto";
  inputs in;
  app.add_option(
         "--q", q_path,
         "q [tokens, heads, head_dim], float16, float32 or float64 (computed as float32); k, "
         "v and dout share its dtype")
      ->required()
      ->check(dcpp_cli::path());
  app.add_option("--k", k_path, "k [tokens, kv_heads, head_dim] (kv_heads divides heads)")
      ->required()
      ->check(dcpp_cli::path());
  app.add_option("--v", v_path,
                 "v [tokens, kv_heads, v_head_dim] (v_head_dim may differ from q's: MLA's 192/128)")
      ->required()
      ->check(dcpp_cli::path());
  app.add_option("--cu-seqlens", cu_path,
                 "cu_seqlens int32 or int64 [sequences + 1], real lengths from 0 to tokens "
                 "(zero-length sequences allowed)")
      ->required()
      ->check(dcpp_cli::path());
  app.add_option("--dout", dout_path,
                 "dO [tokens, heads, v_head_dim] (like o): also run the backward (dq, dk, dv)")
      ->check(dcpp_cli::path());
  app.add_option("--cp", in.cp, "ranks each sequence is split over (zigzag)")
      ->transform(dcpp_cli::decimal(in.cp))
      ->check(CLI::Range(1, 64));
  app.add_option("--scale", in.scale, "softmax scale (default 1/sqrt(head_dim))")
      ->check(dcpp_cli::positive_float());
  app.add_option("--dtype", dtype,
                 "compute type: auto (the input's), fp32, fp16, bf16 (bf16 outputs are written "
                 "as float32)")
      ->check(CLI::IsMember({"auto", "fp32", "fp16", "bf16"}));
  app.add_option("--out-dir", out_dir, "where o.npy, lse.npy (dq.npy, dk.npy, dv.npy) go")
      ->check(dcpp_cli::path());
  CLI11_PARSE(app, argc, argv);
  return dcpp::guarded_main("ring_attention_io: ", [&]() -> int {
    std::vector<std::string> outputs{out_dir + "/o.npy", out_dir + "/lse.npy"};
    if (!dout_path.empty())
      for (const char* name : {"/dq.npy", "/dk.npy", "/dv.npy"})
        outputs.push_back(out_dir + name);
    dcpp::refuse_outputs_over_inputs("--out-dir", outputs,
                                     {{"--q", q_path},
                                      {"--k", k_path},
                                      {"--v", v_path},
                                      {"--cu-seqlens", cu_path},
                                      {"--dout", dout_path}});
    const auto qa = dcpp::read_npy(q_path), ka = dcpp::read_npy(k_path),
               va = dcpp::read_npy(v_path), cu = dcpp::read_npy(cu_path);
    dcpp::npy_array da;
    if (!dout_path.empty())
      da = dcpp::read_npy(dout_path), in.backward = true;
    if (qa.shape.size() != 3 || ka.shape.size() != 3 || va.shape.size() != 3)
      throw shape_error(fmt::format("--q, --k and --v must be [tokens, heads, head_dim]; got {}, "
                                    "{} and {} dimensions",
                                    qa.shape.size(), ka.shape.size(), va.shape.size()));
    for (const auto* a : {&qa, &ka, &va})
      if (a->shape[0] < 1 || a->shape[1] < 1 || a->shape[1] > 4096 || a->shape[2] < 1 ||
          a->shape[2] > 4096)
        throw shape_error(fmt::format("{} has shape {}; expected at least one token, 1 to 4096 "
                                      "heads and a head dim of 1 to 4096",
                                      a == &qa   ? "--q"
                                      : a == &ka ? "--k"
                                                 : "--v",
                                      a->shape_text()));
    in.tokens = qa.shape[0];
    in.heads = static_cast<int>(qa.shape[1]);
    in.head_dim = static_cast<int>(qa.shape[2]);
    in.kv_heads = static_cast<int>(ka.shape[1]);
    in.v_head_dim = static_cast<int>(va.shape[2]);
    if (ka.shape[0] != in.tokens || ka.shape[2] != in.head_dim || va.shape[0] != in.tokens ||
        va.shape[1] != ka.shape[1])
      throw shape_error(fmt::format("--k [{}, {}, {}] must be [{}, kv_heads, {}] and --v [{}, {}, "
                                    "{}] [{}, kv_heads, v_head_dim]",
                                    ka.shape[0], ka.shape[1], ka.shape[2], in.tokens, in.head_dim,
                                    va.shape[0], va.shape[1], va.shape[2], in.tokens));
    if (in.kv_heads < 1 || in.heads % in.kv_heads != 0)
      throw shape_error(fmt::format("--q has {} heads, not a multiple of the {} heads of --k",
                                    in.heads, in.kv_heads));
    if (!dcpp::kernels::attention_head_shape_supported(in.head_dim, in.v_head_dim))
      throw shape_error(dcpp::detail::head_shape_message(in.head_dim, in.v_head_dim)
                            .substr(std::string_view("ring attention: ").size()));
    for (const auto x : dcpp::cu_seqlens_from_npy(cu, in.tokens, "--cu-seqlens"))
      in.cu.push_back(static_cast<std::int32_t>(x)); // below 2^31: checked
    const dcpp::npy_array* dp = in.backward ? &da : nullptr;
    if (dp && da.shape != std::vector<std::int64_t>{in.tokens, in.heads, in.v_head_dim})
      throw shape_error(fmt::format("--dout has shape {}; must be [{}, {}, {}] (tokens, heads of "
                                    "--q, head dim of --v)",
                                    da.shape_text(), in.tokens, in.heads, in.v_head_dim));
    const std::string input_dtype =
        dcpp::common_float_dtype({{"--q", &qa}, {"--k", &ka}, {"--v", &va}, {"--dout", dp}});
    if (dtype == "auto") {
      dtype = input_dtype == "<f2" ? "fp16" : "fp32";
      if (input_dtype == "<f8")
        fmt::print(stderr, "ring_attention_io: note: the inputs are float64; computing and "
                           "writing float32\n");
    }
    // the outputs' directory: what this run creates is removed again if it fails
    dcpp::output_directory dir(out_dir, "--out-dir");
    int status = 0;
    if (dtype == "fp16")
      status = run<dcpp::half>(in, qa, ka, va, dp, out_dir, "<f2");
    else if (dtype == "bf16")
      status = run<dcpp::bfloat16>(in, qa, ka, va, dp, out_dir, "<f4");
    else
      status = run<float>(in, qa, ka, va, dp, out_dir, "<f4");
    dir.keep();
    return status;
  });
}
