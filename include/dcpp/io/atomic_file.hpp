// Output files written so that a failed run leaves nothing behind and never damages a file that
// was there: the text goes to a temporary file beside the target, every write and the close are
// checked, and only then is it renamed into place. POSIX.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/error.hpp"

namespace dcpp {

//! True when the paths `a` and `b` name one file: the same device and inode where both exist
//! (`./x` and `x`, an absolute and a relative path, a link and its target), else the same
//! absolute path once normalised with its existing symbolic links resolved. Two outputs of one
//! run, or an output and an input, must not be one file: the later write would replace the
//! earlier, or the input.
inline bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {};
  struct stat sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const std::filesystem::path ca = std::filesystem::weakly_canonical(a, ea);
  const std::filesystem::path cb = std::filesystem::weakly_canonical(b, eb);
  if (ea || eb)
    return std::filesystem::path(a).lexically_normal() ==
           std::filesystem::path(b).lexically_normal();
  return ca == cb;
}

//! Refuses a run whose output would replace one of its inputs: throws dcpp::error naming `what`,
//! the output, the input's flag and its path when one of `outputs` is one of `inputs` (pairs of
//! flag and path; empty paths are absent inputs) by `same_file`.
inline void
refuse_outputs_over_inputs(std::string_view what, const std::vector<std::string>& outputs,
                           const std::vector<std::pair<std::string, std::string>>& inputs) {
  for (const auto& out : outputs)
    for (const auto& [flag, in] : inputs)
      if (!in.empty() && same_file(out, in))
        throw error(status_code::io_error,
                    fmt::format("{}: the output '{}' is the input {} '{}': writing it would "
                                "replace the input",
                                what, out, flag, in));
}

//! One output staged in a temporary file beside `target` (same directory, so the rename is
//! atomic). `write` and `close` throw dcpp::error naming `what`, the path and the system's
//! reason; `commit` renames into place. A staged file that is not committed is removed.
class staged_file {
public:
  staged_file(std::string target, std::string what)
      : target_(std::move(target)), what_(std::move(what)) {
    // a symbolic link: replace the file it names, not the link
    struct stat st {};
    if (::lstat(target_.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      if (char* real = ::realpath(target_.c_str(), nullptr)) {
        target_ = real;
        std::free(real);
      }
    }
    // not a regular file (a device such as /dev/null or /dev/stdout, a pipe): written in place,
    // since it cannot be replaced; every write and the close are still checked
    if (::stat(target_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        fail("cannot write");
      }
      fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd_ < 0)
        fail("cannot open");
      direct_ = true;
      return;
    }
    std::string pattern = target_ + ".tmp.XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    fd_ = ::mkstemp(name.data());
    if (fd_ < 0)
      fail("cannot create a file beside");
    temp_.assign(name.data());
    // mkstemp makes the file 0600; give it what a plain create would (0666 less the umask)
    const mode_t mask = ::umask(0);
    ::umask(mask);
    if (::fchmod(fd_, 0666 & ~mask) != 0)
      fail("cannot set the permissions of a file beside");
  }
  staged_file(const staged_file&) = delete;
  staged_file& operator=(const staged_file&) = delete;
  ~staged_file() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!committed_ && !temp_.empty())
      ::unlink(temp_.c_str());
  }

  //! Writes all of `text` (throws on a short write: a full disk, a quota).
  void write(std::string_view text) {
    while (!text.empty()) {
      const ::ssize_t n = ::write(fd_, text.data(), text.size());
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        fail("cannot write");
      text.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  //! Flushes to the device and closes (a full disk may only show here).
  void close() {
    if (fd_ < 0)
      return;
    if (!direct_ && ::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS)
      fail("cannot write");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      fail("cannot write");
  }
  //! Renames the closed file into place.
  void commit() {
    close();
    if (!direct_ && ::rename(temp_.c_str(), target_.c_str()) != 0)
      fail("cannot replace");
    committed_ = true;
  }
  [[nodiscard]] const std::string& target() const noexcept { return target_; }

private:
  [[noreturn]] void fail(std::string_view doing) const {
    throw error(status_code::io_error,
                fmt::format("{}: {} '{}': {}", what_, doing, target_, std::strerror(errno)));
  }

  std::string target_, what_, temp_;
  int fd_ = -1;
  bool committed_ = false;
  bool direct_ = false; //!< not a regular file: written in place
};

//! Writes `text` to `path` through a staged file: the target is either the complete new text or
//! untouched.
inline void write_file_atomically(const std::string& path, std::string_view text,
                                  std::string what) {
  staged_file f(path, std::move(what));
  f.write(text);
  f.commit();
}

//! Several outputs that appear together or not at all: each is staged and written in full
//! (`add`), and only when all are written does `commit` rename them into place, so a failure
//! while writing any of them (a full disk, an unwritable target) leaves none of them and no
//! existing file changed. Two outputs naming the same file are refused before either is written.
class staged_outputs {
public:
  explicit staged_outputs(std::string what) : what_(std::move(what)) {}

  //! Stages `bytes` for `path` (written and closed now; renamed by `commit`).
  void add(const std::string& path, std::string_view bytes) {
    auto file = std::make_unique<staged_file>(path, what_);
    for (const auto& other : files_)
      if (other->target() == file->target())
        throw error(status_code::io_error,
                    fmt::format("{}: two outputs name the same file '{}'", what_, path));
    file->write(bytes);
    file->close();
    files_.push_back(std::move(file));
  }
  //! Renames every staged output into place.
  void commit() {
    for (auto& file : files_)
      file->commit();
  }

private:
  std::string what_;
  std::vector<std::unique_ptr<staged_file>> files_;
};

//! A directory for a run's outputs: the missing part of `path` is created now, and removed again
//! (when still empty) by the destructor unless `keep` was called, so a failed run leaves no
//! directory it made. Errors name `what`, the path and the system's reason.
class output_directory {
public:
  output_directory(const std::filesystem::path& path, std::string what) {
    std::vector<std::filesystem::path> missing;
    std::error_code ec;
    for (auto p = path.lexically_normal(); !p.empty(); p = p.parent_path()) {
      const auto st = std::filesystem::status(p, ec);
      if (std::filesystem::is_directory(st))
        break;
      if (std::filesystem::exists(st))
        throw error(status_code::io_error,
                    fmt::format("{}: '{}' is not a directory", what, p.string()));
      missing.push_back(p);
      if (p == p.parent_path())
        break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (!std::filesystem::create_directory(*it, ec) && ec)
        throw error(status_code::io_error, fmt::format("{}: cannot create directory '{}': {}", what,
                                                       it->string(), ec.message()));
      created_.push_back(*it);
    }
  }
  output_directory(const output_directory&) = delete;
  output_directory& operator=(const output_directory&) = delete;
  ~output_directory() {
    if (kept_)
      return;
    std::error_code ec;
    for (auto it = created_.rbegin(); it != created_.rend(); ++it)
      std::filesystem::remove(*it, ec); // only an empty directory is removed
  }
  //! The run succeeded: the directories stay.
  void keep() noexcept { kept_ = true; }

private:
  std::vector<std::filesystem::path> created_;
  bool kept_ = false;
};

} // namespace dcpp
