// Work started ahead on a second thread and taken later, in turn, by the thread that started it:
// the balanced portfolio builds and searches its next levelled run while the one before runs;
// and a gate such work may wait at before it starts.
// The result is the work's alone, so a plan does not depend on whether it ran ahead; where no
// thread can be started the caller does the work in turn.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <future>
#include <mutex>
#include <optional>
#include <system_error>
#include <utility>

namespace dcpp::detail {

//! At most one piece of work ahead, filed under a key. Owned and called by one thread; the work
//! itself must only read what that thread leaves alone until `take` (or the destructor) returns.
template <class Result>
class ahead {
public:
  ahead() = default;
  ahead(const ahead&) = delete;
  ahead& operator=(const ahead&) = delete;
  //! Waits for work still running: it may read what its owner is about to destroy.
  ~ahead() { drop(); }

  //! Starts `work` on a new thread under `key` (after waiting for any work before it). False
  //! where no thread could be started: nothing runs then.
  template <class Work>
  bool start(std::size_t key, Work&& work) {
    drop();
    try {
      future_ = std::async(std::launch::async, std::forward<Work>(work));
    } catch (const std::system_error&) { // no thread left to the process
      return false;
    }
    key_ = key;
    return true;
  }

  //! Whether work was started under `key` and not yet taken.
  [[nodiscard]] bool holds(std::size_t key) const noexcept {
    return future_.valid() && key_ == key;
  }

  //! The result of the work started under `key`, once it is done (what it threw is thrown here);
  //! none where nothing was started under `key`. Work under another key is waited for and
  //! dropped with what it threw: nothing runs ahead after this.
  std::optional<Result> take(std::size_t key) {
    if (!holds(key)) {
      drop();
      return std::nullopt;
    }
    std::future<Result> f = std::move(future_);
    return f.get();
  }

  //! Waits for work still running and drops it with its result or what it threw.
  void drop() noexcept {
    if (future_.valid()) {
      future_.wait();
      future_ = {};
    }
  }

private:
  std::future<Result> future_;
  std::size_t key_ = 0;
};

//! A gate that opens once, from any thread; work on a second thread may wait at it, to run
//! after other work ahead rather than beside it on the same core.
class gate {
public:
  void open() {
    {
      const std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  //! Returns once the gate is open.
  void wait() {
    std::unique_lock lock(mutex_);
    opened_.wait(lock, [this] { return open_; });
  }
  [[nodiscard]] bool is_open() {
    const std::lock_guard lock(mutex_);
    return open_;
  }

private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

} // namespace dcpp::detail
