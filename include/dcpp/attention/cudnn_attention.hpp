// cuDNN's SDPA as the step kernel of dcpp's device ring (`cuda_ring_attention<C, T,
// cudnn_attention<T>>`): each ring step becomes the calls of dcpp/attention/sdpa_calls.hpp, each
// a cuDNN frontend graph over ragged (THD) segments of real rows, with a top-left causal mask or
// none. The forward writes the step's partial O (fp32) and LSE (the ring merges the steps: this
// policy does not fuse the merge); the backward adds each call's dQ, dK and dV into the ring's
// fp32 accumulators, from the final O and LSE the ring hands it, as cuDNN's backward expects.
//
// cuDNN writes O and the gradients in the input type (fp16 or bf16): one rounding per call more
// than dcpp's kernels, whose partial results stay fp32 (tests/attention/test_sdpa_calls.cpp holds
// the plumbing to the same tolerance with a stand-in for cuDNN). Needs cuDNN 9 and its frontend
// headers (PyPI: nvidia-cudnn-cu13 and nvidia-cudnn-frontend; Meson: -Dcudnn=enabled, the
// `dcpp_cudnn_dep` dependency). Compiled and linked in CI; it has never run on a GPU there.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/attention/partition.hpp"
#include "dcpp/attention/ring.hpp"
#include "dcpp/attention/ring_cuda.hpp"
#include "dcpp/attention/sdpa_calls.hpp"
#include "dcpp/cuda/memory.hpp"
#include "dcpp/error.hpp"
#include "dcpp/kernels/attention/library_ops_launch.hpp" // kernels/: the element-wise launches
#include "dcpp/kernels/attention/ring_attention_launch.hpp"

namespace dcpp {

namespace detail {

inline void cudnn_check(cudnn_frontend::error_t e, const char* what) {
  if (!e.is_good())
    throw error(status_code::communication_error,
                fmt::format("cuDNN attention: {} failed: {}", what, e.get_message()));
}
inline void cudnn_check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS)
    throw error(status_code::communication_error,
                fmt::format("cuDNN attention: {} failed: {}", what, cudnnGetErrorString(s)));
}

//! One call's ragged description in device memory: per entry its real rows (int32 [b]) and the
//! element offsets of its segments in Q, K, V, O and the LSE (int32 [b + 1], the last one past
//! the end), as cuDNN's padding mask and ragged offsets read them.
struct cudnn_call {
  sdpa_call call;
  std::int64_t b = 0, s_q = 0, s_kv = 0; // entries; the longest query and key segments
  std::int64_t total_q = 0, total_kv = 0;
  device_array<std::int32_t> seq_q, seq_kv, off_q, off_k, off_v, off_o, off_stats;
};

} // namespace detail

//! The step kernel as cuDNN's SDPA (see the file's comment). `handle` is the caller's cuDNN
//! handle: the policy sets its stream to `stream`, the ring's compute stream, and every call
//! runs there. fp16 and bf16 inputs (cuDNN's SDPA takes no fp32).
template <class T>
class cudnn_attention {
  static_assert(std::is_same_v<T, half> || std::is_same_v<T, bfloat16>,
                "cudnn_attention: cuDNN's SDPA takes fp16 or bf16 inputs");

public:
  cudnn_attention(const ring_partition& part, const attention_shape& shape, cudnnHandle_t handle,
                  cudaStream_t stream)
      : part_(part), shape_(shape), handle_(handle), stream_(stream) {
    detail::cudnn_check(cudnnSetStream(handle_, stream_), "cudnnSetStream");
    const std::int64_t n = part.tokens();
    const std::int64_t widest =
        n * std::max(shape.heads, shape.kv_heads) * std::max(shape.head_dim, shape.value_dim());
    if (widest >= std::numeric_limits<std::int32_t>::max())
      throw error(status_code::invalid_option,
                  fmt::format("cuDNN attention: {} rows x {} heads x head dim {} = {} elements; "
                              "its ragged offsets are int32, the limit is {}",
                              n, std::max(shape.heads, shape.kv_heads),
                              std::max(shape.head_dim, shape.value_dim()), widest,
                              std::numeric_limits<std::int32_t>::max() - 1));
    // every owner's step, worked out once: its calls and their device descriptions
    const int cp = part.cp(), rank = part.rank();
    by_owner_.resize(static_cast<std::size_t>(cp));
    for (int owner = 0; owner < cp; ++owner) {
      const auto kind = owner == rank  ? kernels::ring_step_kind::diagonal
                        : owner < rank ? kernels::ring_step_kind::lower
                                       : kernels::ring_step_kind::upper;
      for (sdpa_call& c : sdpa_calls(part, kind, part.real_of(owner)))
        by_owner_[static_cast<std::size_t>(owner)].push_back(describe(std::move(c)));
    }
  }

  //! The step's partial O (fp32) and LSE over its query rows (the rows without a visible key:
  //! O = 0, LSE = -inf); the ring merges the steps.
  void forward_step(const attention_step<T>& s) {
    const auto& p = s.params;
    const std::int64_t on = p.tokens * p.heads * shape_.value_dim(), ln = p.tokens * p.heads;
    ensure_forward_space(on, ln);
    const auto& calls = by_owner_[static_cast<std::size_t>(s.kv_owner)];
    for (std::size_t c = 0; c < calls.size(); ++c) {
      // the first call writes the step's result, a second one is merged into it
      float* o = c == 0 ? p.o : o_call_.data();
      float* lse = c == 0 ? p.lse : lse_call_.data();
      zero(o_t_.data(), on);
      fill(lse, -std::numeric_limits<float>::infinity(), ln);
      run_forward(calls[c], p, lse);
      detail::attention_cuda_check(kernels::attention_widen<T>(o_t_.data(), o, on, stream_),
                                   "attention_widen");
      if (c > 0)
        merge(p);
    }
    if (calls.empty()) { // no visible key anywhere in the step
      detail::attention_cuda_check(
          cudaMemsetAsync(p.o, 0, static_cast<std::size_t>(on) * sizeof(float), stream_),
          "cudaMemsetAsync");
      fill(p.lse, -std::numeric_limits<float>::infinity(), ln);
    }
  }

  //! The step's dQ, dK and dV added into the ring's fp32 accumulators.
  void backward_step(const attention_step<T>& s) {
    const auto& p = s.params;
    const std::int64_t qn = p.tokens * p.heads * shape_.head_dim;
    const std::int64_t kn = p.tokens * p.kv_heads * shape_.head_dim;
    const std::int64_t vn = p.tokens * p.kv_heads * shape_.value_dim();
    ensure_backward_space(qn, kn, vn);
    for (const auto& c : by_owner_[static_cast<std::size_t>(s.kv_owner)]) {
      zero(dq_t_.data(), qn);
      zero(dk_t_.data(), kn);
      zero(dv_t_.data(), vn);
      run_backward(c, p);
      detail::attention_cuda_check(
          kernels::attention_add_widened<T>(p.dq, dq_t_.data(), qn, stream_),
          "attention_add_widened");
      detail::attention_cuda_check(
          kernels::attention_add_widened<T>(p.dk, dk_t_.data(), kn, stream_),
          "attention_add_widened");
      detail::attention_cuda_check(
          kernels::attention_add_widened<T>(p.dv, dv_t_.data(), vn, stream_),
          "attention_add_widened");
    }
  }

private:
  enum uid : std::int64_t {
    q_uid = 1,
    k_uid,
    v_uid,
    o_uid,
    stats_uid,
    do_uid,
    dq_uid,
    dk_uid,
    dv_uid,
    seq_q_uid,
    seq_kv_uid,
    off_q_uid,
    off_k_uid,
    off_v_uid,
    off_o_uid,
    off_stats_uid
  };
  //! A graph is built once per (pass, mask, entries, longest segments).
  using graph_key = std::tuple<bool, bool, std::int64_t, std::int64_t, std::int64_t>;

  detail::cudnn_call describe(sdpa_call call) const {
    detail::cudnn_call d;
    const auto b = static_cast<std::int64_t>(call.entries.size());
    d.b = b;
    // the longest segments rounded up to 64 rows, so that batches of similar lengths share a graph
    d.s_q = (call.longest_q() + 63) / 64 * 64;
    d.s_kv = (call.longest_k() + 63) / 64 * 64;
    std::vector<std::int32_t> seq_q, seq_kv, off_q, off_k, off_v, off_o, off_stats;
    const std::int64_t H = shape_.heads, Hk = shape_.kv_heads, DQK = shape_.head_dim,
                       DV = shape_.value_dim();
    for (const sdpa_entry& e : call.entries) {
      seq_q.push_back(e.q_rows), seq_kv.push_back(e.k_rows);
      d.total_q += e.q_rows, d.total_kv += e.k_rows;
      off_q.push_back(static_cast<std::int32_t>(e.q_begin * H * DQK));
      off_k.push_back(static_cast<std::int32_t>(e.k_begin * Hk * DQK));
      off_v.push_back(static_cast<std::int32_t>(e.k_begin * Hk * DV));
      off_o.push_back(static_cast<std::int32_t>(e.q_begin * H * DV));
      off_stats.push_back(static_cast<std::int32_t>(e.q_begin * H));
    }
    const sdpa_entry& last = call.entries.back();
    off_q.push_back(static_cast<std::int32_t>((last.q_begin + last.q_rows) * H * DQK));
    off_k.push_back(static_cast<std::int32_t>((last.k_begin + last.k_rows) * Hk * DQK));
    off_v.push_back(static_cast<std::int32_t>((last.k_begin + last.k_rows) * Hk * DV));
    off_o.push_back(static_cast<std::int32_t>((last.q_begin + last.q_rows) * H * DV));
    off_stats.push_back(static_cast<std::int32_t>((last.q_begin + last.q_rows) * H));
    d.seq_q = detail::device_array<std::int32_t>(seq_q);
    d.seq_kv = detail::device_array<std::int32_t>(seq_kv);
    d.off_q = detail::device_array<std::int32_t>(off_q);
    d.off_k = detail::device_array<std::int32_t>(off_k);
    d.off_v = detail::device_array<std::int32_t>(off_v);
    d.off_o = detail::device_array<std::int32_t>(off_o);
    d.off_stats = detail::device_array<std::int32_t>(off_stats);
    d.call = std::move(call);
    return d;
  }

  static constexpr cudnn_frontend::DataType_t io_type() {
    return std::is_same_v<T, half> ? cudnn_frontend::DataType_t::HALF
                                   : cudnn_frontend::DataType_t::BFLOAT16;
  }

  //! A packed [b, heads, s, d] tensor of rows of `heads * d` elements, at ragged offsets.
  static std::shared_ptr<cudnn_frontend::graph::Tensor_attributes>
  packed(cudnn_frontend::graph::Graph& g, const char* name, std::int64_t id, std::int64_t b,
         std::int64_t heads, std::int64_t s, std::int64_t d,
         const std::shared_ptr<cudnn_frontend::graph::Tensor_attributes>& offsets) {
    auto t = g.tensor(cudnn_frontend::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(id)
                          .set_dim({b, heads, s, d})
                          .set_stride({s * heads * d, d, heads * d, 1}));
    t->set_ragged_offset(offsets);
    return t;
  }
  static std::shared_ptr<cudnn_frontend::graph::Tensor_attributes>
  int_tensor(cudnn_frontend::graph::Graph& g, const char* name, std::int64_t id, std::int64_t n) {
    return g.tensor(cudnn_frontend::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(id)
                        .set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(cudnn_frontend::DataType_t::INT32));
  }

  //! The graph of one call (built and cached at its first use).
  cudnn_frontend::graph::Graph& graph_of(const detail::cudnn_call& c, bool backward) {
    const graph_key key{backward, c.call.causal, c.b, c.s_q, c.s_kv};
    if (auto it = graphs_.find(key); it != graphs_.end())
      return *it->second;
    namespace fe = cudnn_frontend;
    auto g = std::make_unique<fe::graph::Graph>();
    g->set_io_data_type(io_type())
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const std::int64_t H = shape_.heads, Hk = shape_.kv_heads, DQK = shape_.head_dim,
                       DV = shape_.value_dim();
    const auto seq_q = int_tensor(*g, "seq_q", seq_q_uid, c.b);
    const auto seq_kv = int_tensor(*g, "seq_kv", seq_kv_uid, c.b);
    const auto off_q = int_tensor(*g, "off_q", off_q_uid, c.b + 1);
    const auto off_k = int_tensor(*g, "off_k", off_k_uid, c.b + 1);
    const auto off_v = int_tensor(*g, "off_v", off_v_uid, c.b + 1);
    const auto off_o = int_tensor(*g, "off_o", off_o_uid, c.b + 1);
    const auto off_stats = int_tensor(*g, "off_stats", off_stats_uid, c.b + 1);
    const auto q = packed(*g, "q", q_uid, c.b, H, c.s_q, DQK, off_q);
    const auto k = packed(*g, "k", k_uid, c.b, Hk, c.s_kv, DQK, off_k);
    const auto v = packed(*g, "v", v_uid, c.b, Hk, c.s_kv, DV, off_v);
    if (!backward) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("dcpp_ring_step")
                         .set_generate_stats(true)
                         .set_attn_scale(shape_.softmax_scale())
                         .set_padding_mask(true)
                         .set_seq_len_q(seq_q)
                         .set_seq_len_kv(seq_kv);
      if (c.call.causal)
        options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
            .set_diagonal_band_right_bound(0);
      auto [o, stats] = g->sdpa(q, k, v, options);
      o->set_output(true)
          .set_uid(o_uid)
          .set_dim({c.b, H, c.s_q, DV})
          .set_stride({c.s_q * H * DV, DV, H * DV, 1});
      o->set_ragged_offset(off_o);
      stats->set_output(true)
          .set_uid(stats_uid)
          .set_data_type(fe::DataType_t::FLOAT)
          .set_dim({c.b, H, c.s_q, 1})
          .set_stride({c.s_q * H, 1, H, 1});
      stats->set_ragged_offset(off_stats);
    } else {
      const auto o = packed(*g, "o", o_uid, c.b, H, c.s_q, DV, off_o);
      const auto d_o = packed(*g, "do", do_uid, c.b, H, c.s_q, DV, off_o);
      auto stats = g->tensor(fe::graph::Tensor_attributes()
                                 .set_name("stats")
                                 .set_uid(stats_uid)
                                 .set_dim({c.b, H, c.s_q, 1})
                                 .set_stride({c.s_q * H, 1, H, 1})
                                 .set_data_type(fe::DataType_t::FLOAT));
      stats->set_ragged_offset(off_stats);
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("dcpp_ring_step_backward")
                         .set_attn_scale(shape_.softmax_scale())
                         .set_padding_mask(true)
                         .set_seq_len_q(seq_q)
                         .set_seq_len_kv(seq_kv)
                         .set_max_total_seq_len_q((c.total_q + 63) / 64 * 64)
                         .set_max_total_seq_len_kv((c.total_kv + 63) / 64 * 64);
      if (c.call.causal)
        options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
            .set_diagonal_band_right_bound(0);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, options);
      dq->set_output(true)
          .set_uid(dq_uid)
          .set_dim({c.b, H, c.s_q, DQK})
          .set_stride({c.s_q * H * DQK, DQK, H * DQK, 1});
      dq->set_ragged_offset(off_q);
      dk->set_output(true)
          .set_uid(dk_uid)
          .set_dim({c.b, Hk, c.s_kv, DQK})
          .set_stride({c.s_kv * Hk * DQK, DQK, Hk * DQK, 1});
      dk->set_ragged_offset(off_k);
      dv->set_output(true)
          .set_uid(dv_uid)
          .set_dim({c.b, Hk, c.s_kv, DV})
          .set_stride({c.s_kv * Hk * DV, DV, Hk * DV, 1});
      dv->set_ragged_offset(off_v);
    }
    detail::cudnn_check(g->validate(), "graph validate");
    detail::cudnn_check(g->build_operation_graph(handle_), "build_operation_graph");
    detail::cudnn_check(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                        "create_execution_plans");
    detail::cudnn_check(g->check_support(handle_), "check_support");
    detail::cudnn_check(g->build_plans(handle_), "build_plans");
    std::int64_t bytes = 0;
    detail::cudnn_check(g->get_workspace_size(bytes), "get_workspace_size");
    if (static_cast<std::size_t>(bytes) > workspace_.size())
      workspace_ = detail::device_array<std::byte>(static_cast<std::size_t>(bytes));
    return *graphs_.emplace(key, std::move(g)).first->second;
  }

  std::unordered_map<std::int64_t, void*> descriptors(const detail::cudnn_call& c) const {
    return {{seq_q_uid, c.seq_q.data()},        {seq_kv_uid, c.seq_kv.data()},
            {off_q_uid, c.off_q.data()},        {off_k_uid, c.off_k.data()},
            {off_v_uid, c.off_v.data()},        {off_o_uid, c.off_o.data()},
            {off_stats_uid, c.off_stats.data()}};
  }

  void run_forward(const detail::cudnn_call& c, const kernels::attention_params<T>& p, float* lse) {
    auto& g = graph_of(c, false);
    auto pack = descriptors(c);
    pack[q_uid] = const_cast<T*>(p.q);
    pack[k_uid] = const_cast<T*>(p.k);
    pack[v_uid] = const_cast<T*>(p.v);
    pack[o_uid] = o_t_.data();
    pack[stats_uid] = lse;
    detail::cudnn_check(g.execute(handle_, pack, workspace_.data()), "sdpa forward");
  }

  void run_backward(const detail::cudnn_call& c, const kernels::attention_params<T>& p) {
    auto& g = graph_of(c, true);
    auto pack = descriptors(c);
    pack[q_uid] = const_cast<T*>(p.q);
    pack[k_uid] = const_cast<T*>(p.k);
    pack[v_uid] = const_cast<T*>(p.v);
    pack[o_uid] = const_cast<T*>(p.out);
    pack[do_uid] = const_cast<T*>(p.dout);
    pack[stats_uid] = const_cast<float*>(p.lse_final);
    pack[dq_uid] = dq_t_.data();
    pack[dk_uid] = dk_t_.data();
    pack[dv_uid] = dv_t_.data();
    detail::cudnn_check(g.execute(handle_, pack, workspace_.data()), "sdpa backward");
  }

  //! The second call's (o_call_, lse_call_) merged into the step's (p.o, p.lse), every row.
  void merge(const kernels::attention_params<T>& p) {
    if (all_rows_.count == 0)
      all_rows_ = detail::device_tiles(part_.tiles(64, attention_rows::all));
    detail::attention_cuda_check(
        detail::with_value_dim(
            shape_,
            [&](auto d) {
              constexpr int D = decltype(d)::value;
              const kernels::attention_merge_params<D> mp{
                  p.o, p.lse, o_call_.data(), lse_call_.data(), shape_.heads, all_rows_.view()};
              return kernels::attention_merge<D>(mp, stream_);
            }),
        "attention_merge");
  }

  void zero(void* p, std::int64_t elements) {
    detail::attention_cuda_check(
        cudaMemsetAsync(p, 0, static_cast<std::size_t>(elements) * sizeof(T), stream_),
        "cudaMemsetAsync");
  }
  void fill(float* p, float value, std::int64_t n) {
    detail::attention_cuda_check(kernels::attention_fill(p, value, n, stream_), "attention_fill");
  }
  void ensure_forward_space(std::int64_t on, std::int64_t ln) {
    if (o_t_.size() < static_cast<std::size_t>(on)) {
      o_t_ = detail::device_array<T>(static_cast<std::size_t>(on));
      o_call_ = detail::device_array<float>(static_cast<std::size_t>(on));
      lse_call_ = detail::device_array<float>(static_cast<std::size_t>(ln));
    }
  }
  void ensure_backward_space(std::int64_t qn, std::int64_t kn, std::int64_t vn) {
    if (dq_t_.size() < static_cast<std::size_t>(qn)) {
      dq_t_ = detail::device_array<T>(static_cast<std::size_t>(qn));
      dk_t_ = detail::device_array<T>(static_cast<std::size_t>(kn));
      dv_t_ = detail::device_array<T>(static_cast<std::size_t>(vn));
    }
  }

  ring_partition part_;
  attention_shape shape_;
  cudnnHandle_t handle_;
  cudaStream_t stream_;
  std::vector<std::vector<detail::cudnn_call>> by_owner_; // per KV owner: its step's calls
  std::map<graph_key, std::unique_ptr<cudnn_frontend::graph::Graph>> graphs_;
  detail::device_array<std::byte> workspace_;
  detail::device_array<T> o_t_, dq_t_, dk_t_, dv_t_; // a call's outputs, in the input type
  detail::device_array<float> o_call_, lse_call_;    // a second call's result, widened
  detail::device_tiles all_rows_{attention_tile_list{}};
};

static_assert(!attention_fuses_merge<cudnn_attention<bfloat16>>);

} // namespace dcpp
