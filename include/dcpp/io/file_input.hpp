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

//! The most bytes `read_file` and `read_standard_input` read unless told otherwise.
inline constexpr std::int64_t input_limit = std::int64_t{1} << 40;

//! What a reader expects: any bytes, or text (lengths, JSON, CSV), which holds no NUL byte.
enum class file_content : std::uint8_t { binary, text };

namespace detail {
//! Reads `fd` to its end (see read_file); `name` is the path quoted in errors.
inline std::string read_descriptor(int fd, std::string_view name, std::string_view what,
                                   std::int64_t limit, file_content content) {
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
    // a binary file given for text stops here, and an endless device (/dev/zero, /dev/urandom)
    // stops at once instead of filling the memory
    if (content == file_content::text)
      if (const void* nul = std::memchr(buffer, 0, static_cast<std::size_t>(n)))
        throw error(status_code::parse_error,
                    fmt::format("{}: '{}' holds a NUL byte (byte {}): it is not text", what, name,
                                text.size() + static_cast<std::size_t>(
                                                  static_cast<const char*>(nul) - buffer)));
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}
} // namespace detail

//! The whole of `path` (`what` names the option or role in errors). Regular files, pipes and
//! character devices are read; a directory is refused. At most `limit` bytes (default 2^40):
//! a longer input is refused before it is read. `file_content::text`: a NUL byte is refused
//! where it is read (`'F' holds a NUL byte (byte 0): it is not text`).
inline std::string read_file(const std::string& path, std::string_view what,
                             std::int64_t limit = input_limit,
                             file_content content = file_content::binary) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw error(status_code::io_error,
                fmt::format("{}: cannot open '{}': {}", what, path, std::strerror(errno)));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  return detail::read_descriptor(fd, path, what, limit, content);
}

//! All of standard input (file descriptor 0, read directly: nothing may have been read from
//! std::cin before); a read error (standard input redirected from a directory, EIO) is an error
//! naming `what`, not an empty text.
inline std::string read_standard_input(std::string_view what, std::int64_t limit = input_limit,
                                       file_content content = file_content::binary) {
  return detail::read_descriptor(0, "<stdin>", what, limit, content);
}

} // namespace dcpp
