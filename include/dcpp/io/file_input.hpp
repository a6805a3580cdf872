// Reading a whole input file with errors that name it: a directory, a missing file, a read error
// (EIO, EISDIR) each become a dcpp::error instead of an empty text or an uncaught
// std::ios_base::failure. POSIX.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "dcpp/error.hpp"

namespace dcpp {

namespace detail {
//! Reads `fd` to its end (see read_file); `name` is the path quoted in errors.
inline std::string read_descriptor(int fd, std::string_view name, std::string_view what,
                                   std::int64_t limit) {
  const auto fail = [&](std::string_view doing, int err) {
    return error(status_code::io_error,
                 fmt::format("{}: {} '{}': {}", what, doing, name, std::strerror(err)));
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw fail("cannot read", errno);
  if (S_ISDIR(st.st_mode))
    throw fail("cannot read", EISDIR);
  if (S_ISREG(st.st_mode) && st.st_size > limit)
    throw error(status_code::io_error,
                fmt::format("{}: '{}' holds {} bytes; the limit is {}", what, name,
                            static_cast<std::int64_t>(st.st_size), limit));
  std::string text;
  if (S_ISREG(st.st_mode))
    text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ::ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw fail("cannot read", errno);
    if (n == 0)
      break;
    if (static_cast<std::int64_t>(text.size()) + n > limit)
      throw error(status_code::io_error,
                  fmt::format("{}: '{}' holds more than the limit of {} bytes", what, name, limit));
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}
} // namespace detail

//! The whole of `path` (`what` names the option or role in errors). Regular files, pipes and
//! character devices are read; a directory is refused. At most `limit` bytes (default 2^40):
//! a longer input is refused before it is read.
inline std::string read_file(const std::string& path, std::string_view what,
                             std::int64_t limit = std::int64_t{1} << 40) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw error(status_code::io_error,
                fmt::format("{}: cannot open '{}': {}", what, path, std::strerror(errno)));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  return detail::read_descriptor(fd, path, what, limit);
}

//! All of standard input (file descriptor 0, read directly: nothing may have been read from
//! std::cin before); a read error (standard input redirected from a directory, EIO) is an error
//! naming `what`, not an empty text.
inline std::string read_standard_input(std::string_view what,
                                       std::int64_t limit = std::int64_t{1} << 40) {
  return detail::read_descriptor(0, "<stdin>", what, limit);
}

} // namespace dcpp
