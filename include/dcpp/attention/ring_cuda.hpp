// THD ring attention on CUDA devices with a device-memory communicator (NCCL): the same ring,
// merge and backward ring as dcpp/attention/ring.hpp, on two streams. The compute stream runs
// the step kernels; the communicator's stream runs the K/V (and dK/dV) transfers, started after
// an event that says the compute stream no longer reads the buffer being overwritten, and the
// compute stream waits on the transfer's event (never the host) before the next step.
// The step kernel is a policy (`Policy`, docs/kernels.md "The step kernel as a policy"):
// `cuda_attention<T>`, dcpp's kernels, by default; any type with forward_step/backward_step
// taking device pointers can replace it, with the LSE merge fused into its forward or run by the
// ring after each step. Plain C++ (no nvcc needed);
// link kernels/dcpp/kernels/attention/ring_attention_instances.cu compiled by nvcc (Meson:
// `dcpp_cuda_kernels_dep`) for the kernel launches.
#pragma once

#include <cuda_runtime_api.h>

#include <concepts>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/attention/partition.hpp"
#include "dcpp/attention/ring.hpp"
#include "dcpp/cuda/memory.hpp"
#include "dcpp/error.hpp"
#include "dcpp/kernels/attention/ring_attention_launch.hpp" // kernels/: declarations of the launches

namespace dcpp {

namespace detail {

inline void attention_cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw error(status_code::communication_error,
                fmt::format("ring attention: {} failed: {}", what, cudaGetErrorString(e)));
}

//! A work list in device memory.
struct device_tiles {
  device_array<std::int32_t> seq, begin, end;
  int count = 0;
  explicit device_tiles(const attention_tile_list& t)
      : seq(t.seq), begin(t.begin), end(t.end), count(t.count()) {}
  [[nodiscard]] kernels::attention_tiles view() const noexcept {
    return {seq.data(), begin.data(), end.data(), count};
  }
};

} // namespace detail

//! dcpp's per-step kernels on the device, on `stream`. Uploads the partition's work lists once.
template <class T>
class cuda_attention {
public:
  static constexpr bool fuses_merge = true; //!< the forward kernel merges in its epilogue

  cuda_attention(const ring_partition& part, cudaStream_t stream)
      : stream_(stream), all_(part.tiles(64, attention_rows::all)),
        first_(part.tiles(64, attention_rows::first_half)),
        second_(part.tiles(64, attention_rows::second_half)),
        wide_all_(part.tiles(128, attention_rows::all)),
        wide_first_(part.tiles(128, attention_rows::first_half)),
        wide_second_(part.tiles(128, attention_rows::second_half)) {
    // the merge takes 64-row blocks for every head shape; the step kernels 64 or 128
    static_assert(kernels::attention_tile<64, 64, T>::rows == 64 &&
                  kernels::attention_tile<128, 128, T>::rows == 64 &&
                  kernels::attention_tile<192, 128, T>::rows == 64 &&
                  kernels::attention_tile<256, 256, T>::rows == 64);
  }

  void forward_step(const attention_step<T>& s) const {
    detail::attention_cuda_check(
        detail::with_head_dims(s.shape,
                               [&](auto dqk, auto dv) {
                                 constexpr int DQK = decltype(dqk)::value;
                                 constexpr int DV = decltype(dv)::value;
                                 using cfg = kernels::attention_tile<DQK, DV, T>;
                                 auto p = s.params;
                                 p.tiles = tiles<cfg::forward_rows>(query_rows_of(p.kind));
                                 return kernels::attention_forward<DQK, DV, T>(p, stream_);
                               }),
        "attention_forward");
  }
  void backward_step(const attention_step<T>& s) const {
    detail::attention_cuda_check(
        detail::with_head_dims(s.shape,
                               [&](auto dqk, auto dv) {
                                 constexpr int DQK = decltype(dqk)::value;
                                 constexpr int DV = decltype(dv)::value;
                                 constexpr int rows =
                                     kernels::attention_tile<DQK, DV, T>::backward_rows;
                                 auto p = s.params;
                                 p.tiles = tiles<rows>(key_rows_of(p.kind));
                                 return kernels::attention_backward<DQK, DV, T>(
                                     p, tiles<rows>(query_rows_of(p.kind)), stream_);
                               }),
        "attention_backward");
  }
  //! The work list of the rows a merge covers.
  [[nodiscard]] kernels::attention_tiles rows(kernels::ring_step_kind kind) const {
    return tiles(query_rows_of(kind));
  }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

private:
  //! The work list of `rows` (all, first or second halves) in blocks of 64 or 128 rows.
  template <int Block = 64>
  [[nodiscard]] kernels::attention_tiles tiles(attention_rows rows) const {
    static_assert(Block == 64 || Block == 128);
    const bool wide = Block == 128;
    return (rows == attention_rows::all          ? (wide ? wide_all_ : all_)
            : rows == attention_rows::first_half ? (wide ? wide_first_ : first_)
                                                 : (wide ? wide_second_ : second_))
        .view();
  }

  cudaStream_t stream_;
  detail::device_tiles all_, first_, second_, wide_all_, wide_first_, wide_second_;
};

//! Ring attention of one rank of a CP group on the device. `comm` is the group's device-memory
//! communicator (its exchange handles provide `wait_on(stream)`, its `stream()` runs transfers);
//! kernels run on `stream`. Buffers are device pointers in the partition's local layout, like
//! the host functions of dcpp/attention/ring.hpp. Work space is allocated once per object.
//! `Policy` computes each ring step (see `attention_step`): it enqueues its work on `stream`
//! (the stream it was made with) and never waits on the host. Where it promises `fuses_merge`
//! its forward merges into the running O and LSE; otherwise it writes the step's partial O
//! (fp32) and LSE and the ring merges them with dcpp's merge kernel.
template <class C, class T, class Policy = cuda_attention<T>>
requires attention_policy<Policy, T>
class cuda_ring_attention {
public:
  static constexpr bool fused = attention_fuses_merge<Policy>;

  //! With a policy made from the partition and the compute stream (dcpp's kernels).
  cuda_ring_attention(C comm, const ring_partition& part, const attention_shape& shape,
                      cudaStream_t stream) requires
      std::constructible_from<Policy, const ring_partition&, cudaStream_t>
      : cuda_ring_attention(std::move(comm), part, shape, stream, Policy(part, stream)) {}

  //! With a policy of the caller's (e.g. `cudnn_attention`), which runs on `stream`.
  cuda_ring_attention(C comm, const ring_partition& part, const attention_shape& shape,
                      cudaStream_t stream, Policy policy)
      : comm_(std::move(comm)), part_(part), shape_(shape), stream_(stream),
        policy_(std::move(policy)) {
    static_assert(C::buffer_memory == memory_space::device,
                  "cuda_ring_attention moves device buffers; use a device-memory communicator");
    const std::int64_t n = part.tokens();
    qn_ = n * shape.heads * shape.head_dim;
    on_ = n * shape.heads * shape.value_dim();
    kn_ = n * shape.kv_heads * shape.head_dim;
    vn_ = n * shape.kv_heads * shape.value_dim();
    offsets_ = detail::device_array<std::int32_t>(part.offsets());
    for (int r = 0; r < part.cp(); ++r)
      real_.emplace_back(part.real_of(r));
    if constexpr (!fused)
      if (part.cp() > 1)
        for (const attention_rows rows :
             {attention_rows::all, attention_rows::first_half, attention_rows::second_half})
          merge_rows_.emplace_back(part.tiles(64, rows));
  }
  cuda_ring_attention(const cuda_ring_attention&) = delete;
  cuda_ring_attention& operator=(const cuda_ring_attention&) = delete;

  [[nodiscard]] Policy& policy() noexcept { return policy_; }

  //! o [tokens, heads, V head dim] and lse [tokens, heads] from q, k, v; enqueued on the compute
  //! stream. q must be 16-byte aligned (cudaMalloc's 256 bytes are).
  void forward(const T* q, const T* k, const T* v, T* o, float* lse) {
    const int cp = part_.cp(), rank = part_.rank();
    detail::check_attention_call(comm_, part_, shape_, 0, {}, {{"q", q}});
    ensure_forward_space();
    copy_kv(k, v);
    for (int step = 0, cur = 0; step < cp; ++step, cur ^= 1) {
      const int owner = (rank - step + cp) % cp;
      auto transfer = start_transfer(kv_[cur].data(), kv_[cur ^ 1].data(), kn_ + vn_, step + 1 < cp,
                                     0x7a00 + step);
      attention_step<T> s = make_step(step, owner, q, kv_[cur].data());
      const bool partial = !fused && step > 0; // the ring merges this step's result
      s.params.o = partial ? o_part_.data() : o_acc_.data();
      s.params.lse = partial ? lse_part_.data() : lse;
      s.params.merge = fused && step > 0; // the forward merges into the running O and LSE
      policy_.forward_step(s);
      if (partial)
        merge(s.params.kind, lse);
      finish_transfer(transfer);
    }
    detail::attention_cuda_check(kernels::attention_convert<T>(o_acc_.data(), o, on_, stream_),
                                 "attention_convert");
  }

  //! dq, dk, dv from q, k, v, the forward's o and lse, and dout; on the compute stream.
  void backward(const T* q, const T* k, const T* v, const T* o, const float* lse, const T* dout,
                T* dq, T* dk, T* dv) {
    const int cp = part_.cp(), rank = part_.rank();
    detail::check_attention_call(comm_, part_, shape_, 1, {}, {{"q", q}, {"dout", dout}});
    ensure_backward_space();
    kernels::attention_params<T> pre;
    pre.out = o, pre.dout = dout, pre.dsum = dsum_.data(), pre.tokens = part_.tokens();
    pre.heads = shape_.heads;
    detail::attention_cuda_check(
        detail::with_value_dim(
            shape_,
            [&](auto d) { return kernels::attention_dsum<decltype(d)::value, T>(pre, stream_); }),
        "attention_dsum");
    copy_kv(k, v);
    zero(dq_acc_.data(), qn_);
    // dK/dV of the K/V block a step sees: the step adds its part into a zeroed buffer; the
    // block's accumulator from the previous rank, received while the step computed, is added and
    // the sum goes on to the next rank while the following step computes (as in ring.hpp).
    const std::int64_t dkv_n = kn_ + vn_;
    std::optional<handle<float>> dkv_transfer;
    for (int step = 0, cur = 0; step < cp; ++step, cur ^= 1) {
      const int owner = (rank - step + cp) % cp;
      auto transfer = start_transfer(kv_[cur].data(), kv_[cur ^ 1].data(), kn_ + vn_, step + 1 < cp,
                                     0x7b00 + step);
      zero(dkv_[cur].data(), dkv_n);
      attention_step<T> s = make_step(step, owner, q, kv_[cur].data());
      auto& p = s.params;
      p.out = o, p.dout = dout, p.lse_final = lse, p.dsum = dsum_.data(), p.dq = dq_acc_.data();
      p.dk = dkv_[cur].data(), p.dv = dkv_[cur].data() + kn_;
      policy_.backward_step(s);
      finish_transfer(transfer);
      if (dkv_transfer) {
        finish_transfer(dkv_transfer);
        detail::attention_cuda_check(
            kernels::attention_accumulate(dkv_[cur].data(), dkv_in_[cur].data(), dkv_n, stream_),
            "attention_accumulate");
      }
      auto next_transfer =
          start_transfer(dkv_[cur].data(), dkv_in_[cur ^ 1].data(), dkv_n, cp > 1, 0x7c00 + step);
      dkv_transfer.reset();
      if (next_transfer)
        dkv_transfer.emplace(std::move(*next_transfer));
    }
    finish_transfer(dkv_transfer);
    const float* dkv = cp > 1 ? dkv_in_[cp % 2].data() : dkv_[0].data();
    detail::attention_cuda_check(kernels::attention_convert<T>(dq_acc_.data(), dq, qn_, stream_),
                                 "attention_convert");
    detail::attention_cuda_check(kernels::attention_convert<T>(dkv, dk, kn_, stream_),
                                 "attention_convert");
    detail::attention_cuda_check(kernels::attention_convert<T>(dkv + kn_, dv, vn_, stream_),
                                 "attention_convert");
  }

private:
  template <class E>
  using handle =
      decltype(std::declval<C&>().exchange(std::span<const E>(), 0, std::span<E>(), 0, 0));

  attention_step<T> make_step(int step, int owner, const T* q, const T* kv) const {
    attention_step<T> s;
    s.step = step, s.kv_owner = owner, s.partition = &part_, s.shape = shape_;
    auto& p = s.params;
    p.q = q, p.k = kv, p.v = kv + kn_;
    p.tokens = part_.tokens(), p.heads = shape_.heads, p.kv_heads = shape_.kv_heads;
    p.scale = shape_.softmax_scale();
    p.kind = detail::ring_step_kind_of(step, owner, part_.rank());
    p.layout = {offsets_.data(), real_[static_cast<std::size_t>(part_.rank())].data(),
                real_[static_cast<std::size_t>(owner)].data(), part_.sequences()};
    return s;
  }

  //! Starts send -> next / receive <- previous on the communicator's stream once the compute
  //! stream is past everything enqueued so far (the receive buffer's last reader).
  template <class E>
  std::optional<handle<E>> start_transfer(const E* send, E* recv, std::int64_t n, bool run,
                                          int tag) {
    if (!run)
      return std::nullopt;
    ready_(stream_, comm_.stream());
    const int cp = part_.cp(), rank = part_.rank();
    return comm_.exchange(std::span<const E>(send, static_cast<std::size_t>(n)), (rank + 1) % cp,
                          std::span<E>(recv, static_cast<std::size_t>(n)), (rank - 1 + cp) % cp,
                          tag);
  }
  template <class H>
  void finish_transfer(std::optional<H>& h) {
    if (h)
      h->wait_on(stream_);
  }

  void copy_kv(const T* k, const T* v) {
    detail::attention_cuda_check(cudaMemcpyAsync(kv_[0].data(), k,
                                                 static_cast<std::size_t>(kn_) * sizeof(T),
                                                 cudaMemcpyDeviceToDevice, stream_),
                                 "copy K");
    detail::attention_cuda_check(cudaMemcpyAsync(kv_[0].data() + kn_, v,
                                                 static_cast<std::size_t>(vn_) * sizeof(T),
                                                 cudaMemcpyDeviceToDevice, stream_),
                                 "copy V");
  }
  void zero(float* p, std::int64_t n) {
    detail::attention_cuda_check(
        cudaMemsetAsync(p, 0, static_cast<std::size_t>(n) * sizeof(float), stream_), "memset");
  }
  void ensure_kv() {
    if (kv_[0].size() == 0)
      for (auto& b : kv_)
        b = detail::device_array<T>(static_cast<std::size_t>(kn_ + vn_));
  }
  void ensure_forward_space() {
    ensure_kv();
    if (o_acc_.size() == 0)
      o_acc_ = detail::device_array<float>(static_cast<std::size_t>(on_));
    if (!fused && part_.cp() > 1 && o_part_.size() == 0) {
      o_part_ = detail::device_array<float>(static_cast<std::size_t>(on_));
      lse_part_ =
          detail::device_array<float>(static_cast<std::size_t>(part_.tokens() * shape_.heads));
    }
  }
  //! The step's partial result (o_part_, lse_part_) merged into the running one (o_acc_, lse)
  //! over the step's query rows.
  void merge(kernels::ring_step_kind kind, float* lse) {
    const attention_rows rows = query_rows_of(kind);
    const detail::device_tiles& tiles = merge_rows_[rows == attention_rows::all          ? 0
                                                    : rows == attention_rows::first_half ? 1
                                                                                         : 2];
    detail::attention_cuda_check(
        detail::with_value_dim(shape_,
                               [&](auto d) {
                                 constexpr int D = decltype(d)::value;
                                 const kernels::attention_merge_params<D> mp{
                                     o_acc_.data(),    lse,          o_part_.data(),
                                     lse_part_.data(), shape_.heads, tiles.view()};
                                 return kernels::attention_merge<D>(mp, stream_);
                               }),
        "attention_merge");
  }
  void ensure_backward_space() {
    ensure_kv();
    if (dq_acc_.size() == 0) {
      dq_acc_ = detail::device_array<float>(static_cast<std::size_t>(qn_));
      dsum_ = detail::device_array<float>(static_cast<std::size_t>(part_.tokens() * shape_.heads));
      for (auto& b : dkv_)
        b = detail::device_array<float>(static_cast<std::size_t>(kn_ + vn_));
      if (part_.cp() > 1)
        for (auto& b : dkv_in_)
          b = detail::device_array<float>(static_cast<std::size_t>(kn_ + vn_));
    }
  }

  C comm_;
  ring_partition part_;
  attention_shape shape_;
  cudaStream_t stream_;
  Policy policy_;
  std::int64_t qn_ = 0, on_ = 0, kn_ = 0, vn_ = 0; // elements of Q, O, K, V
  detail::device_array<std::int32_t> offsets_;
  std::vector<detail::device_array<std::int32_t>> real_;
  detail::device_array<T> kv_[2];
  detail::device_array<float> o_acc_, dq_acc_, dsum_;
  detail::device_array<float> o_part_, lse_part_;  // a step's partial result (separate merge)
  std::vector<detail::device_tiles> merge_rows_;   // the merge's work lists: all, first, second
  detail::device_array<float> dkv_[2], dkv_in_[2]; // a step's dK/dV part; what arrives for it
  detail::stream_order ready_; // the compute stream is past the buffer a transfer overwrites
};

} // namespace dcpp
