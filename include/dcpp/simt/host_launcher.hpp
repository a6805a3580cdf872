// The host launcher: runs a kernel body written against dcpp's SIMT layer on the CPU. Each
// thread of a block is a user-space fiber (own stack; a hand-written register switch on x86-64,
// ucontext elsewhere) that runs until it reaches a barrier or a
// warp collective and then yields; a barrier releases when every thread of its scope arrived.
// Blocks run one after another (or spread over a few OS threads, each with its own fibers).
#pragma once

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/core/simt.hpp"
#include "dcpp/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define DCPP_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DCPP_SIMT_ASAN 1
#endif
#endif
#if defined(DCPP_SIMT_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace dcpp::simt {

//! Grid, block and dynamic shared memory of a launch.
struct launch_shape {
  index3 grid;
  index3 block;
  std::size_t shared_bytes = 0;
};

//! Limits the launcher enforces (those of the sm_80 / sm_90 targets) and how it runs.
struct host_launch_options {
  std::size_t max_shared_bytes = 227 * 1024; //!< H100 opt-in maximum per block
  std::size_t stack_bytes = 0;               //!< per fiber; 0 = 256 KiB (1 MiB under ASan)
  unsigned workers = 1;                      //!< OS threads running blocks concurrently
};

class host_context;

namespace detail {

//! A fiber stack from mmap with a PROT_NONE guard page below it, so that an overflow faults.
class fiber_stack {
public:
  explicit fiber_stack(std::size_t bytes) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    size_ = (bytes + page - 1) / page * page;
    base_ = mmap(nullptr, size_ + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED)
      throw error(status_code::invalid_option,
                  fmt::format("host_launch: cannot map a fiber stack of {} bytes", size_));
    mprotect(base_, page, PROT_NONE);
    bottom_ = static_cast<char*>(base_) + page;
    page_ = page;
  }
  fiber_stack(const fiber_stack&) = delete;
  fiber_stack& operator=(const fiber_stack&) = delete;
  ~fiber_stack() { munmap(base_, size_ + page_); }
  [[nodiscard]] void* bottom() const noexcept { return bottom_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

private:
  void* base_ = nullptr;
  void* bottom_ = nullptr;
  std::size_t size_ = 0, page_ = 0;
};

//! A suspended execution context. On x86-64 a hand-written switch saves only the callee-saved
//! registers and the stack pointer (no signal-mask system call, unlike swapcontext, whose call
//! dominates a short block's switches); elsewhere, or with DCPP_SIMT_USE_UCONTEXT, ucontext.
#if defined(__x86_64__) && !defined(DCPP_SIMT_USE_UCONTEXT)
#define DCPP_SIMT_FAST_SWITCH 1
extern "C" void dcpp_simt_switch(void** save_sp, void* load_sp);
extern "C" void dcpp_simt_trampoline();
// Weak, in a COMDAT section: the header may be included by many translation units.
asm(".pushsection .text.dcpp_simt_switch,\"axG\",@progbits,dcpp_simt_switch,comdat\n"
    ".weak dcpp_simt_switch\n"
    ".type dcpp_simt_switch,@function\n"
    "dcpp_simt_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size dcpp_simt_switch, .-dcpp_simt_switch\n"
    ".popsection\n"
    ".pushsection .text.dcpp_simt_trampoline,\"axG\",@progbits,dcpp_simt_trampoline,comdat\n"
    ".weak dcpp_simt_trampoline\n"
    ".type dcpp_simt_trampoline,@function\n"
    "dcpp_simt_trampoline:\n"
    "  movq %r12, %rdi\n  movq %r13, %rsi\n"
    "  andq $-16, %rsp\n"
    "  callq *%r14\n"
    "  ud2\n"
    ".size dcpp_simt_trampoline, .-dcpp_simt_trampoline\n"
    ".popsection\n");

struct fiber_context {
  void* sp = nullptr;
};
//! Prepares `c` to start `fn(a, b)` on the given stack at the first switch into it.
inline void prepare_context(fiber_context& c, void* bottom, std::size_t size,
                            void (*fn)(std::uintptr_t, std::uintptr_t), std::uintptr_t a,
                            std::uintptr_t b) {
#if defined(DCPP_SIMT_ASAN)
  // Frames abandoned on this stack (a thread that threw) leave poisoned shadow behind;
  // swapcontext's interceptor would clear it, this switch must do so itself.
  __asan_unpoison_memory_region(bottom, size);
#endif
  auto* top = reinterpret_cast<std::uintptr_t*>((reinterpret_cast<std::uintptr_t>(bottom) + size) &
                                                ~std::uintptr_t{15});
  top[-1] = 0;                                                       // alignment slot
  top[-2] = reinterpret_cast<std::uintptr_t>(&dcpp_simt_trampoline); // return address
  top[-3] = 0;                                                       // rbp
  top[-4] = 0;                                                       // rbx
  top[-5] = a;                                                       // r12
  top[-6] = b;                                                       // r13
  top[-7] = reinterpret_cast<std::uintptr_t>(fn);                    // r14
  top[-8] = 0;                                                       // r15
  c.sp = top - 8;
}
inline void switch_context(fiber_context& from, fiber_context& to) {
  dcpp_simt_switch(&from.sp, to.sp);
}
#else
struct fiber_context {
  ucontext_t uc{};
};
inline void prepare_context(fiber_context& c, void* bottom, std::size_t size,
                            void (*fn)(std::uintptr_t, std::uintptr_t), std::uintptr_t a,
                            std::uintptr_t b) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = bottom;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  static_assert(sizeof(unsigned) == 4);
  makecontext(&c.uc, reinterpret_cast<void (*)()>(fn), 2, a, b); // 64-bit args on glibc x86-64
}
inline void switch_context(fiber_context& from, fiber_context& to) {
  swapcontext(&from.uc, &to.uc);
}
#endif

class block_runner;

} // namespace detail

//! The SIMT context of a thread run by the host launcher (see dcpp/core/simt.hpp for the
//! contract). Barriers and shuffles switch fibers; everything else is plain C++.
class host_context {
public:
  [[nodiscard]] index3 thread_index() const noexcept { return thread_; }
  [[nodiscard]] index3 block_index() const noexcept { return block_; }
  [[nodiscard]] index3 block_dim() const noexcept { return block_dim_; }
  [[nodiscard]] index3 grid_dim() const noexcept { return grid_dim_; }
  inline void sync_block();
  inline void sync_warp();
  template <class T>
  T shuffle(T value, int src_lane) {
    return exchange(value, [src_lane](unsigned) { return static_cast<unsigned>(src_lane) % 32u; });
  }
  template <class T>
  T shuffle_xor(T value, int lane_mask) {
    return exchange(value,
                    [lane_mask](unsigned lane) { return lane ^ static_cast<unsigned>(lane_mask); });
  }
  template <class T>
  T shuffle_down(T value, unsigned delta) {
    return exchange(value, [delta](unsigned lane) { return lane + delta; });
  }
  template <class T>
  inline T* shared_array(std::size_t count);
  template <class T>
  inline mma_accumulator mma_m16n8k16(const mma_a_fragment& a, const mma_b_fragment& b,
                                      const mma_accumulator& c);
  inline void cp_async_16(void* dst, const void* src, bool valid);
  inline void cp_async_commit();
  template <int N>
  void cp_async_wait() {
    static_assert(N >= 0, "cp.async.wait_group takes a non-negative count");
    complete_copies(N);
  }
  template <int M, bool Trans>
  inline ldmatrix_fragment<M> ldmatrix(const void* row);

private:
  inline void complete_copies(int keep_groups);
  friend class detail::block_runner;
  template <class T, class Source>
  inline T exchange(T value, Source source);

  detail::block_runner* runner_ = nullptr;
  unsigned id_ = 0;
  index3 thread_, block_, block_dim_, grid_dim_;
  std::size_t shared_offset_ = 0;
  int committed_groups_ = 0; // cp.async groups this thread committed
};

namespace detail {

//! Runs blocks of one launch on the calling OS thread, one fiber per block thread.
class block_runner {
public:
  enum class state : std::uint8_t { ready, at_block_barrier, at_warp_sync, done };

  block_runner(const launch_shape& shape, const host_launch_options& options,
               void (*invoke)(void*, host_context&), void* body)
      : shape_(shape), invoke_(invoke), body_(body), threads_(shape.block.volume()),
        warps_((threads_ + warp_size - 1) / warp_size), shared_(shape.shared_bytes + 16),
        slots_(warps_ * warp_size * slot_bytes) {
    const std::size_t stack = options.stack_bytes != 0 ? options.stack_bytes
#if defined(DCPP_SIMT_ASAN)
                                                       : std::size_t{1} << 20;
#else
                                                       : std::size_t{256} << 10;
#endif
    fibers_.reserve(threads_);
    for (std::size_t i = 0; i < threads_; ++i)
      fibers_.push_back(std::make_unique<fiber>(stack));
    warp_arrived_.assign(warps_, 0);
    copies_.resize(threads_);
  }

  //! Runs block `b` to completion; throws on deadlock or when a thread threw.
  void run(index3 b) {
    // Fresh shared memory holds garbage on a GPU: poison it so reads before writes show.
    std::memset(shared_.data(), 0xcd, shared_.size());
    block_arrived_ = 0;
    done_ = 0;
    std::fill(warp_arrived_.begin(), warp_arrived_.end(), 0u);
    for (auto& c : copies_)
      c.clear();
    const index3 dim = shape_.block;
    for (std::size_t i = 0; i < threads_; ++i) {
      fiber& f = *fibers_[i];
      f.status = state::ready;
      f.context = host_context{};
      f.context.runner_ = this;
      f.context.id_ = static_cast<unsigned>(i);
      f.context.thread_ = {static_cast<unsigned>(i % dim.x),
                           static_cast<unsigned>(i / dim.x % dim.y),
                           static_cast<unsigned>(i / (static_cast<std::size_t>(dim.x) * dim.y))};
      f.context.block_ = b;
      f.context.block_dim_ = dim;
      f.context.grid_dim_ = shape_.grid;
      prepare_context(f.uc, f.stack.bottom(), f.stack.size(), &block_runner::entry,
                      reinterpret_cast<std::uintptr_t>(this), i);
    }
    for (;;) {
      bool progressed = false;
      for (std::size_t i = 0; i < threads_; ++i)
        if (fibers_[i]->status == state::ready) {
          progressed = true;
          resume(i);
          if (failure_)
            std::rethrow_exception(std::exchange(failure_, nullptr));
        }
      if (done_ == threads_)
        return;
      if (!progressed)
        throw error(status_code::invalid_option, deadlock_message(b));
    }
  }

  // Called from fibers.
  void arrive_block(unsigned id) {
    fibers_[id]->status = state::at_block_barrier;
    ++block_arrived_;
    release_block_if_complete();
    if (fibers_[id]->status != state::ready)
      yield(id);
  }

  void arrive_warp(unsigned id) {
    const unsigned w = id / warp_size;
    fibers_[id]->status = state::at_warp_sync;
    if (++warp_arrived_[w] == lanes_in_warp(w)) {
      warp_arrived_[w] = 0;
      for (unsigned l = 0; l < lanes_in_warp(w); ++l)
        fibers_[w * warp_size + l]->status = state::ready;
    } else {
      yield(id);
    }
  }

  [[nodiscard]] unsigned lanes_in_warp(unsigned w) const noexcept {
    return static_cast<unsigned>(std::min<std::size_t>(warp_size, threads_ - w * warp_size));
  }
  [[nodiscard]] unsigned char* slot(unsigned id) noexcept {
    return &slots_[id * slot_bytes];
  }
  [[nodiscard]] unsigned char* shared_memory() noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(shared_.data());
    return shared_.data() + ((16 - address % 16) % 16);
  }
  [[nodiscard]] std::size_t shared_bytes() const noexcept {
    return shape_.shared_bytes;
  }

  //! A warp's A (16x16) and B (16x8) operands of the emulated matrix instruction, as floats.
  [[nodiscard]] float* mma_operands(unsigned warp) {
    if (mma_.empty())
      mma_.resize(warps_ * mma_floats);
    return &mma_[warp * mma_floats];
  }

  //! A cp.async copy not yet performed: it lands at the wait that covers its group, so a read
  //! before that wait sees the poisoned shared memory, as it may on the device.
  struct pending_copy {
    void* dst;
    const void* src;
    int group;
    bool valid;
  };
  [[nodiscard]] std::vector<pending_copy>& copies(unsigned id) noexcept {
    return copies_[id];
  }

  static constexpr std::size_t slot_bytes = 32; // a shuffle value
  static constexpr std::size_t mma_floats = 16 * 16 + 16 * 8;

private:
  struct fiber {
    explicit fiber(std::size_t stack_bytes) : stack(stack_bytes) {}
    fiber_stack stack;
    fiber_context uc;
    state status = state::ready;
    host_context context;
    void* fake_stack = nullptr; // ASan bookkeeping
  };

  static void entry(std::uintptr_t runner, std::uintptr_t id) {
    auto* self = reinterpret_cast<block_runner*>(runner);
#if defined(DCPP_SIMT_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &self->main_stack_bottom_, &self->main_stack_size_);
#endif
    fiber& f = *self->fibers_[id];
    try {
      self->invoke_(self->body_, f.context);
    } catch (...) {
      self->failure_ = std::current_exception();
    }
    f.status = state::done;
    ++self->done_;
    self->release_block_if_complete();
#if defined(DCPP_SIMT_ASAN)
    __sanitizer_start_switch_fiber(nullptr, self->main_stack_bottom_, self->main_stack_size_);
#endif
    switch_context(f.uc, self->main_); // never returns: the fiber is done
  }

  void resume(std::size_t i) {
    fiber& f = *fibers_[i];
#if defined(DCPP_SIMT_ASAN)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack.bottom(), f.stack.size());
#endif
    switch_context(main_, f.uc);
#if defined(DCPP_SIMT_ASAN)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  }

  void yield(unsigned id) {
    fiber& f = *fibers_[id];
#if defined(DCPP_SIMT_ASAN)
    __sanitizer_start_switch_fiber(&f.fake_stack, main_stack_bottom_, main_stack_size_);
#endif
    switch_context(f.uc, main_);
#if defined(DCPP_SIMT_ASAN)
    __sanitizer_finish_switch_fiber(f.fake_stack, &main_stack_bottom_, &main_stack_size_);
#endif
  }

  //! Threads that finished count as arrived (as on sm_70 and later).
  void release_block_if_complete() {
    if (block_arrived_ == 0 || block_arrived_ + done_ != threads_)
      return;
    block_arrived_ = 0;
    for (auto& f : fibers_)
      if (f->status == state::at_block_barrier)
        f->status = state::ready;
  }

  std::string deadlock_message(index3 b) const {
    std::size_t at_block = 0, at_warp = 0;
    for (const auto& f : fibers_) {
      at_block += f->status == state::at_block_barrier;
      at_warp += f->status == state::at_warp_sync;
    }
    return fmt::format("host_launch: deadlock in block ({}, {}, {}): {} threads wait at a block "
                       "barrier, {} at a warp collective, {} finished (a barrier or shuffle not "
                       "reached by every thread of its scope)",
                       b.x, b.y, b.z, at_block, at_warp, done_);
  }

  launch_shape shape_;
  void (*invoke_)(void*, host_context&);
  void* body_;
  std::size_t threads_, warps_;
  std::vector<unsigned char> shared_;
  std::vector<unsigned char> slots_;
  std::vector<float> mma_;
  std::vector<std::unique_ptr<fiber>> fibers_;
  std::vector<std::vector<pending_copy>> copies_;
  std::vector<unsigned> warp_arrived_;
  std::size_t block_arrived_ = 0;
  std::size_t done_ = 0;
  std::exception_ptr failure_;
  fiber_context main_;
  const void* main_stack_bottom_ = nullptr;
  std::size_t main_stack_size_ = 0;
};

} // namespace detail

inline void host_context::sync_block() {
  runner_->arrive_block(id_);
}
inline void host_context::sync_warp() {
  runner_->arrive_warp(id_);
}

template <class T, class Source>
T host_context::exchange(T value, Source source) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= detail::block_runner::slot_bytes);
  const unsigned lane = id_ % warp_size, warp = id_ / warp_size;
  std::memcpy(runner_->slot(id_), &value, sizeof(T));
  runner_->arrive_warp(id_);
  const unsigned src = source(lane);
  T result = value;
  if (src < runner_->lanes_in_warp(warp))
    std::memcpy(&result, runner_->slot(warp * warp_size + src), sizeof(T));
  runner_->arrive_warp(id_); // nobody overwrites a slot before every lane has read
  return result;
}

template <class T>
T* host_context::shared_array(std::size_t count) {
  shared_offset_ = (shared_offset_ + alignof(T) - 1) / alignof(T) * alignof(T);
  const std::size_t end = shared_offset_ + count * sizeof(T);
  DCPP_EXPECTS(end <= runner_->shared_bytes()); // the launch reserved too little shared memory
  T* result = reinterpret_cast<T*>(runner_->shared_memory() + shared_offset_);
  shared_offset_ = end;
  return result;
}

//! The warp matrix instruction, emulated: every lane widens its A and B registers into the
//! warp's operand matrices, then computes its four D elements from them (each product exact in
//! fp32, summed in k order with the C element first; the hardware's internal order and precision
//! are unspecified, so device results agree to fp32 rounding of the dot products, not bit for
//! bit). The placement below (register i of lane 4g+t holds A rows g + 8 (i & 1), columns
//! 2t + 8 (i >> 1) and the next; B register i holds rows 2t + 8i and the next of column g) is
//! written from the PTX ISA independently of mma_a_coord / mma_b_coord; the tests check that the
//! two agree.
template <class T>
mma_accumulator host_context::mma_m16n8k16(const mma_a_fragment& a, const mma_b_fragment& b,
                                           const mma_accumulator& c) {
  static_assert(std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, "half or bfloat16");
  const unsigned lane = id_ % warp_size, warp = id_ / warp_size;
  DCPP_EXPECTS(runner_->lanes_in_warp(warp) == warp_size); // mma needs a full warp
  float* A = runner_->mma_operands(warp);                  // [16][16]
  float* B = A + 16 * 16;                                  // [16][8]
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  auto half_of = [](std::uint32_t word, int which) {
    return to_float(T{static_cast<std::uint16_t>(which == 0 ? word & 0xffffu : word >> 16)});
  };
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      A[(g + (i & 1) * 8) * 16 + t * 2 + j + (i >> 1) * 8] = half_of(a.x[i], j);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      B[(t * 2 + j + i * 8) * 8 + g] = half_of(b.x[i], j);
  runner_->arrive_warp(id_);
  mma_accumulator d;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e / 2) * 8, col = t * 2 + e % 2;
    float acc = c.x[e];
    for (int k = 0; k < 16; ++k)
      acc += A[row * 16 + k] * B[k * 8 + col];
    d.x[e] = acc;
  }
  runner_->arrive_warp(id_); // nobody overwrites the operands before every lane has read
  return d;
}

//! cp.async emulated: the copy is queued with the thread's current group and performed by the
//! wait that covers it (never earlier), so code that reads a tile before waiting reads poison.
void host_context::cp_async_16(void* dst, const void* src, bool valid) {
  DCPP_EXPECTS(reinterpret_cast<std::uintptr_t>(dst) % 16 == 0);           // cp.async needs 16-byte
  DCPP_EXPECTS(!valid || reinterpret_cast<std::uintptr_t>(src) % 16 == 0); // aligned addresses
  [[maybe_unused]] auto* shared = runner_->shared_memory();
  DCPP_EXPECTS(static_cast<unsigned char*>(dst) >= shared &&
               static_cast<unsigned char*>(dst) + 16 <= shared + runner_->shared_bytes());
  runner_->copies(id_).push_back({dst, src, committed_groups_, valid});
}

void host_context::cp_async_commit() {
  ++committed_groups_;
}

void host_context::complete_copies(int keep_groups) {
  auto& queue = runner_->copies(id_);
  const int last = committed_groups_ - keep_groups; // groups below this one complete
  std::size_t kept = 0;
  for (const auto& c : queue) {
    if (c.group < last) {
      if (c.valid)
        std::memcpy(c.dst, c.src, 16);
      else
        std::memset(c.dst, 0, 16);
    } else {
      queue[kept++] = c;
    }
  }
  queue.resize(kept);
}

//! ldmatrix emulated from the PTX ISA's definition ("Warp-level matrix load instruction:
//! ldmatrix"): lane 8i + r gives the address of row r of matrix i; lane l receives, for each
//! matrix, the 16-bit elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1), or with .trans the
//! elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4). Written apart from the mma fragment
//! coordinates; the tests check that an x4 load of a 16x16 tile gives the mma A fragment.
template <int M, bool Trans>
ldmatrix_fragment<M> host_context::ldmatrix(const void* row) {
  static_assert(M == 1 || M == 2 || M == 4, "ldmatrix loads 1, 2 or 4 matrices");
  const unsigned lane = id_ % warp_size, warp = id_ / warp_size;
  DCPP_EXPECTS(runner_->lanes_in_warp(warp) == warp_size); // ldmatrix needs a full warp
  DCPP_EXPECTS(lane >= 8 * M || reinterpret_cast<std::uintptr_t>(row) % 16 == 0); // used rows
  static_assert(sizeof(const void*) <= detail::block_runner::slot_bytes);
  std::memcpy(runner_->slot(id_), &row, sizeof row);
  runner_->arrive_warp(id_);
  ldmatrix_fragment<M> f;
  const unsigned r = lane / 4, c = 2 * (lane % 4);
  for (int m = 0; m < M; ++m) {
    std::uint16_t e[2];
    for (unsigned k = 0; k < 2; ++k) {
      const unsigned src_row = Trans ? c + k : r, src_col = Trans ? r : c + k;
      const unsigned char* base;
      std::memcpy(&base, runner_->slot(warp * warp_size + 8 * static_cast<unsigned>(m) + src_row),
                  sizeof base);
      std::memcpy(&e[k], base + 2 * src_col, 2);
    }
    f.x[m] = static_cast<std::uint32_t>(e[0]) | (static_cast<std::uint32_t>(e[1]) << 16);
  }
  runner_->arrive_warp(id_); // nobody overwrites an address before every lane has read
  return f;
}

//! Checks a launch shape against CUDA's limits; the message names the field, value and limit.
[[nodiscard]] inline status check_launch(const launch_shape& shape,
                                         const host_launch_options& options = {}) {
  const auto fail = [](std::string message) {
    return status::failure(status_code::invalid_option, std::move(message));
  };
  const index3 b = shape.block, g = shape.grid;
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.volume() > 1024 || b.z > 64)
    return fail(fmt::format("launch: block ({}, {}, {}) must have 1 to 1024 threads (z <= 64)", b.x,
                            b.y, b.z));
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    return fail(fmt::format("launch: grid ({}, {}, {}) must be >= 1 with x < 2^31, y and z <= "
                            "65535",
                            g.x, g.y, g.z));
  if (shape.shared_bytes > options.max_shared_bytes)
    return fail(fmt::format("launch: {} bytes of shared memory exceed the limit {}",
                            shape.shared_bytes, options.max_shared_bytes));
  return status::success();
}

//! Runs `body(host_context&)` for every thread of every block of `shape`, honouring barriers and
//! warp collectives. Throws dcpp::error for a bad shape or a deadlock (threads waiting at
//! barriers nobody else reaches), and rethrows what a thread threw (contracts in tests).
template <class Body>
void host_launch(const launch_shape& shape, Body&& body, const host_launch_options& options = {}) {
  throw_if_failed(check_launch(shape, options));
  using body_type = std::remove_reference_t<Body>;
  auto invoke = [](void* b, host_context& ctx) { (*static_cast<body_type*>(b))(ctx); };
  void* erased = const_cast<void*>(static_cast<const void*>(std::addressof(body)));
  const std::size_t blocks = shape.grid.volume();
  auto block_at = [&](std::size_t i) {
    return index3{
        static_cast<unsigned>(i % shape.grid.x),
        static_cast<unsigned>(i / shape.grid.x % shape.grid.y),
        static_cast<unsigned>(i / (static_cast<std::size_t>(shape.grid.x) * shape.grid.y))};
  };
  const unsigned workers =
      static_cast<unsigned>(std::min<std::size_t>(std::max(1u, options.workers), blocks));
  if (workers == 1) {
    detail::block_runner runner(shape, options, invoke, erased);
    for (std::size_t i = 0; i < blocks; ++i)
      runner.run(block_at(i));
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first;
  std::mutex m;
  {
    std::vector<std::jthread> pool;
    for (unsigned w = 0; w < workers; ++w)
      pool.emplace_back([&] {
        try {
          detail::block_runner runner(shape, options, invoke, erased);
          for (std::size_t i = next++; i < blocks && !failed.load(); i = next++)
            runner.run(block_at(i));
        } catch (...) {
          std::lock_guard lock(m);
          if (!first)
            first = std::current_exception();
          failed.store(true);
        }
      });
  }
  if (first)
    std::rethrow_exception(first);
}

} // namespace dcpp::simt
