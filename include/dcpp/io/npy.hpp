// NumPy .npy files (format versions 1.0-3.0, little-endian, C order) for the checkable example
// programs: read into bytes + dtype + shape, convert to the element type a kernel takes, write.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dcpp/core/float16.hpp"
#include "dcpp/error.hpp"
#include "dcpp/io/atomic_file.hpp"
#include "dcpp/io/file_input.hpp"

namespace dcpp {

//! The dtypes the readers convert from (little-endian): float16/32/64, int32/64.
inline constexpr std::string_view npy_dtypes = "<f2 <f4 <f8 <i4 <i8";

//! Whether `descr` is one of `npy_dtypes`.
inline bool npy_dtype_read(std::string_view descr) noexcept {
  return descr.size() == 3 && descr[0] == '<' && npy_dtypes.find(descr) != std::string_view::npos;
}

//! An array as stored: `descr` is NumPy's dtype string ('<f4', '<f2', '<i4', ...), one of
//! `npy_dtypes` after read_npy / parse_npy.
struct npy_array {
  std::string descr;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> data;

  [[nodiscard]] std::int64_t elements() const {
    return std::accumulate(shape.begin(), shape.end(), std::int64_t{1},
                           [](std::int64_t a, std::int64_t b) { return a * b; });
  }
  [[nodiscard]] std::size_t item_size() const {
    return descr.size() == 3 && descr[2] >= '1' && descr[2] <= '8'
               ? static_cast<std::size_t>(descr[2] - '0')
               : 0;
  }
  [[nodiscard]] bool is_float() const { return descr.size() == 3 && descr[1] == 'f'; }
  [[nodiscard]] bool is_integer() const { return descr.size() == 3 && descr[1] == 'i'; }
  //! "[3, 4]"
  [[nodiscard]] std::string shape_text() const {
    return fmt::format("[{}]", fmt::join(shape, ", "));
  }

  //! The values converted to T (float, double, half, bfloat16 or int32/int64), from float16/32/64
  //! or int32/64 storage. Throws naming the file's dtype when it cannot convert.
  template <class T>
  [[nodiscard]] std::vector<T> as(const std::string& what) const {
    if (!npy_dtype_read(descr))
      throw error(status_code::parse_error,
                  fmt::format("{}: dtype '{}' is not one of {}", what, descr, npy_dtypes));
    std::vector<T> out(static_cast<std::size_t>(elements()));
    for (std::size_t i = 0; i < out.size(); ++i) {
      const unsigned char* p = data.data() + i * item_size();
      double v = 0;
      if (descr == "<f4") {
        float f;
        std::memcpy(&f, p, 4);
        v = f;
      } else if (descr == "<f8") {
        std::memcpy(&v, p, 8);
      } else if (descr == "<f2") {
        half h;
        std::memcpy(&h.bits, p, 2);
        v = to_float(h);
      } else if (descr == "<i4") {
        std::int32_t k;
        std::memcpy(&k, p, 4);
        v = k;
      } else {
        std::int64_t k;
        std::memcpy(&k, p, 8);
        if constexpr (std::is_integral_v<T>) { // exact, no trip through double
          if (k < std::numeric_limits<T>::min() || k > std::numeric_limits<T>::max())
            throw error(status_code::parse_error,
                        fmt::format("{}: element {} = {} does not fit the {}-bit integers it is "
                                    "read as",
                                    what, i, k, 8 * sizeof(T)));
          out[i] = static_cast<T>(k);
          continue;
        }
        v = static_cast<double>(k);
      }
      if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
        out[i] = from_float<T>(static_cast<float>(v));
      else
        out[i] = static_cast<T>(v);
    }
    return out;
  }
};

namespace detail {

//! A strict reader of the header's Python dict literal: {'descr': '<f4', 'fortran_order':
//! False, 'shape': (3, 4), } with either quote, any spacing, keys in any order, each once.
class npy_header_parser {
public:
  npy_header_parser(std::string_view text, std::string_view source)
      : text_(text), source_(source) {}

  void parse(npy_array& a, bool& fortran) {
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    for (;;) {
      skip_spaces();
      if (peek() == '}')
        break;
      const std::string key = quoted();
      expect(':');
      skip_spaces();
      if (key == "descr") {
        once(have_descr, key);
        a.descr = quoted();
      } else if (key == "fortran_order") {
        once(have_order, key);
        fortran = boolean();
      } else if (key == "shape") {
        once(have_shape, key);
        a.shape = dims();
      } else {
        fail(fmt::format("unknown header key '{}'", key));
      }
      skip_spaces();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      if (peek() != '}')
        fail(fmt::format("expected ',' or '}}' at header byte {}", at_));
    }
    ++at_;
    skip_spaces();
    if (at_ != text_.size())
      fail(fmt::format("unexpected text after the header dict at byte {}", at_));
    if (!have_descr || !have_order || !have_shape)
      fail(fmt::format("header has no '{}'", !have_descr   ? "descr"
                                             : !have_order ? "fortran_order"
                                                           : "shape"));
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw error(status_code::parse_error, fmt::format("{}: {}", source_, what));
  }
  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }
  void skip_spaces() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t'))
      ++at_;
  }
  void expect(char c) {
    skip_spaces();
    if (peek() != c)
      fail(fmt::format("expected '{}' at header byte {}", c, at_));
    ++at_;
  }
  void once(bool& seen, const std::string& key) const {
    if (seen)
      fail(fmt::format("header key '{}' appears twice", key));
    seen = true;
  }
  std::string quoted() {
    skip_spaces();
    const char q = peek();
    if (q != '\'' && q != '"')
      fail(fmt::format("expected a quoted string at header byte {}", at_));
    const auto end = text_.find(q, at_ + 1);
    if (end == std::string_view::npos || end - at_ > 64)
      fail(fmt::format("unterminated string at header byte {}", at_));
    std::string out(text_.substr(at_ + 1, end - at_ - 1));
    at_ = end + 1;
    return out;
  }
  bool boolean() {
    if (text_.substr(at_, 4) == "True")
      return at_ += 4, true;
    if (text_.substr(at_, 5) == "False")
      return at_ += 5, false;
    fail(fmt::format("'fortran_order' must be True or False (header byte {})", at_));
  }
  std::vector<std::int64_t> dims() {
    if (peek() != '(')
      fail(fmt::format("'shape' must be a tuple (header byte {})", at_));
    ++at_;
    std::vector<std::int64_t> out;
    for (;;) {
      skip_spaces();
      if (peek() == ')')
        break;
      const std::size_t begin = at_;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9')
        ++at_;
      std::int64_t d = 0;
      const auto [end, ec] = std::from_chars(text_.data() + begin, text_.data() + at_, d);
      if (begin == at_ || ec != std::errc()) {
        std::size_t stop = at_;
        while (stop < text_.size() && text_[stop] != ',' && text_[stop] != ')')
          ++stop;
        fail(fmt::format("shape dimension {} is '{}', not a non-negative integer below 2^63",
                         out.size(), text_.substr(begin, stop - begin)));
      }
      if (out.size() >= 32)
        fail("shape has more than 32 dimensions");
      out.push_back(d);
      skip_spaces();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      if (peek() != ')')
        fail(fmt::format("expected ',' or ')' in 'shape' at header byte {}", at_));
    }
    ++at_;
    return out;
  }

  std::string_view text_, source_;
  std::size_t at_ = 0;
};

} // namespace detail

//! The most header bytes a .npy file may declare: NumPy pads its headers to 64 bytes and writes a
//! few hundred; a larger one is not a real array's description.
inline constexpr std::uint64_t npy_header_limit = std::uint64_t{1} << 20;

namespace detail {
//! Where a .npy header ends, from the file's first bytes (`start`, at least 12 of them unless
//! the file is shorter): the magic, the version and the header length are checked, and the
//! header length against `npy_header_limit`.
struct npy_prefix {
  unsigned major = 0;
  std::size_t prefix = 0;          // magic, version and the header length's bytes
  std::uint64_t header_length = 0; // the dict literal's bytes after them
};
inline npy_prefix npy_read_prefix(std::string_view start, std::string_view source) {
  const auto fail = [&](const std::string& what) {
    return error(status_code::parse_error, fmt::format("{}: {}", source, what));
  };
  if (start.size() < 10 || start.substr(0, 6) != std::string_view("\x93NUMPY", 6))
    throw fail("not a .npy file (bad magic)");
  npy_prefix p;
  p.major = static_cast<unsigned char>(start[6]);
  const auto minor = static_cast<unsigned char>(start[7]);
  if (p.major < 1 || p.major > 3)
    throw fail(fmt::format("format version {}.{} is not 1.0, 2.0 or 3.0", p.major, minor));
  const std::size_t length_bytes = p.major == 1 ? 2 : 4;
  if (start.size() < 8 + length_bytes)
    throw fail("truncated header");
  for (std::size_t i = 0; i < length_bytes; ++i)
    p.header_length |= std::uint64_t{static_cast<unsigned char>(start[8 + i])} << (8 * i);
  p.prefix = 8 + length_bytes;
  if (p.header_length > npy_header_limit)
    throw fail(fmt::format("header length {} is past the limit of {} bytes", p.header_length,
                           npy_header_limit));
  return p;
}

//! The array `header` (the dict literal) describes, without its data, and the data's bytes.
inline std::pair<npy_array, std::uint64_t> npy_read_header(std::string_view header, unsigned major,
                                                           std::string_view source) {
  const auto fail = [&](const std::string& what) {
    return error(status_code::parse_error, fmt::format("{}: {}", source, what));
  };
  if (major < 3)
    for (const char c : header)
      if (static_cast<unsigned char>(c) >= 0x80)
        throw fail("header is not ASCII (format 1.0 and 2.0 headers are)");
  npy_array a;
  bool fortran = false;
  npy_header_parser(header, source).parse(a, fortran);
  if (!a.descr.empty() && (a.descr[0] == '=' || a.descr[0] == '|'))
    a.descr[0] = '<';
  if (a.descr.size() == 3 && a.descr[0] == '>')
    throw fail(fmt::format("dtype '{}' is big-endian; only little-endian is read", a.descr));
  if (!npy_dtype_read(a.descr))
    throw fail(fmt::format("dtype '{}' is not one of {}", a.descr, npy_dtypes));
  if (fortran)
    throw fail("Fortran order is not supported (write the array C-contiguous)");
  std::uint64_t need = a.item_size();
  for (const auto d : a.shape)
    if (__builtin_mul_overflow(need, static_cast<std::uint64_t>(d), &need) ||
        need > (std::uint64_t{1} << 62))
      throw fail(
          fmt::format("shape {} of dtype {} needs more than 2^62 bytes", a.shape_text(), a.descr));
  return {std::move(a), need};
}

inline error npy_size_mismatch(std::string_view source, const npy_array& a, std::uint64_t need,
                               std::string_view have) {
  return error(status_code::parse_error,
               fmt::format("{}: holds {} bytes of data; its shape {} of dtype {} needs {}", source,
                           have, a.shape_text(), a.descr, need));
}
} // namespace detail

//! Parses a whole .npy file held in `bytes` (format 1.0, 2.0 or 3.0). The header is checked
//! before anything is allocated: the magic, the version, the header length against the bytes
//! there are (and `npy_header_limit`), every key, the dtype (one of `npy_dtypes`; big-endian and
//! Fortran order refused), every dimension (non-negative integers whose product in bytes fits 64
//! bits), and the data size, which must equal what the shape needs. Errors name `source` and
//! what is wrong.
inline npy_array parse_npy(std::string_view bytes, std::string_view source) {
  const detail::npy_prefix p = detail::npy_read_prefix(bytes, source);
  if (p.header_length > bytes.size() - p.prefix)
    throw error(status_code::parse_error,
                fmt::format("{}: header length {} runs past the end of the file ({} bytes)", source,
                            p.header_length, bytes.size()));
  auto [a, need] =
      detail::npy_read_header(bytes.substr(p.prefix, p.header_length), p.major, source);
  const std::uint64_t have = bytes.size() - p.prefix - p.header_length;
  if (have != need)
    throw detail::npy_size_mismatch(source, a, need, std::to_string(have));
  const auto* data =
      reinterpret_cast<const unsigned char*>(bytes.data() + p.prefix + p.header_length);
  a.data.assign(data, data + need);
  return a;
}

//! Reads and parses `path` as parse_npy does, header first: the magic, the version and the
//! header are read and checked before the data, whose size the header gives, is read; a regular
//! file's size must match before its data is read, and any other input (a pipe, a device) is
//! read no further than that size and one byte more. So `/dev/zero` or an endless pipe is
//! refused at its first bytes, and data past `limit` bytes is refused before it is read. Errors
//! name the file and what is wrong with it; a directory, a missing or unreadable file are errors
//! too.
inline npy_array read_npy(const std::string& path, std::int64_t limit = input_limit) {
  constexpr std::string_view what = "npy input";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw error(status_code::io_error,
                fmt::format("{}: cannot open '{}': {}", what, path, std::strerror(errno)));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode))
    throw error(status_code::io_error,
                fmt::format("{}: cannot read '{}': {}", what, path,
                            std::strerror(S_ISDIR(st.st_mode) ? EISDIR : errno)));
  // reads up to `n` bytes into `out` from where the file stands; fewer only at its end
  const auto read_up_to = [&](unsigned char* out, std::uint64_t n) {
    std::uint64_t got = 0;
    while (got < n) {
      const ::ssize_t r = ::read(
          fd, out + got,
          static_cast<std::size_t>(std::min<std::uint64_t>(n - got, std::uint64_t{1} << 30)));
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        throw error(status_code::io_error,
                    fmt::format("{}: cannot read '{}': {}", what, path, std::strerror(errno)));
      if (r == 0)
        break;
      got += static_cast<std::uint64_t>(r);
    }
    return got;
  };
  std::string start(12, '\0');
  start.resize(read_up_to(reinterpret_cast<unsigned char*>(start.data()), start.size()));
  const detail::npy_prefix p = detail::npy_read_prefix(start, path);
  // the header's bytes: those read with the prefix, then the rest
  std::string header = start.substr(p.prefix);
  const std::size_t before = header.size();
  if (p.header_length > before) {
    header.resize(static_cast<std::size_t>(p.header_length));
    const std::uint64_t got = read_up_to(reinterpret_cast<unsigned char*>(header.data()) + before,
                                         p.header_length - before);
    if (got < p.header_length - before)
      throw error(status_code::parse_error,
                  fmt::format("{}: header length {} runs past the end of the file ({} bytes)", path,
                              p.header_length, p.prefix + before + got));
  }
  // start held 12 bytes: at most 2 past a version 1.0 prefix, none past a later one
  const std::string data_start =
      header.substr(std::min<std::size_t>(header.size(), p.header_length));
  header.resize(std::min<std::size_t>(header.size(), p.header_length));
  auto [a, need] = detail::npy_read_header(header, p.major, path);
  if (S_ISREG(st.st_mode)) {
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const std::uint64_t have = size - std::min<std::uint64_t>(size, p.prefix + p.header_length);
    if (have != need)
      throw detail::npy_size_mismatch(path, a, need, std::to_string(have));
  }
  if (need > static_cast<std::uint64_t>(limit))
    throw error(status_code::io_error,
                fmt::format("{}: '{}': its shape {} of dtype {} needs {} bytes; the limit is {}",
                            what, path, a.shape_text(), a.descr, need, limit));
  if (data_start.size() > need)
    throw detail::npy_size_mismatch(path, a, need, fmt::format("more than {}", need));
  // in chunks: an input that is not a regular file has not shown its size, and a header that
  // promises more than it holds must not reserve memory for it
  a.data.assign(data_start.begin(), data_start.end());
  while (a.data.size() < need) {
    const std::size_t old = a.data.size();
    const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(need - old, 1u << 24));
    a.data.resize(old + chunk);
    const std::uint64_t got = read_up_to(a.data.data() + old, chunk);
    if (got < chunk)
      throw detail::npy_size_mismatch(path, a, need, std::to_string(old + got));
  }
  unsigned char extra = 0;
  if (read_up_to(&extra, 1) != 0)
    throw detail::npy_size_mismatch(path, a, need, fmt::format("more than {}", need));
  return a;
}

//! The bytes of a .npy file (format 1.0) of `values` with dtype `descr` ('<f4', '<f2', '<i4')
//! and `shape`.
template <class T>
std::string npy_bytes(const std::string& descr, const std::vector<std::int64_t>& shape,
                      const std::vector<T>& values) {
  std::string dims;
  for (const auto d : shape)
    dims += fmt::format("{}, ", d);
  if (shape.size() > 1)
    dims.resize(dims.size() - 2);
  else if (shape.size() == 1)
    dims.resize(dims.size() - 1);
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  const auto length = static_cast<std::uint16_t>(header.size());
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(length & 0xff));
  bytes.push_back(static_cast<char>(length >> 8));
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  return bytes;
}

//! Writes `values` with dtype `descr` ('<f4', '<f2', '<i4') and `shape` (format 1.0), staged
//! beside the target and renamed into place: a failed write leaves no partial file.
template <class T>
void write_npy(const std::string& path, const std::string& descr,
               const std::vector<std::int64_t>& shape, const std::vector<T>& values) {
  write_file_atomically(path, npy_bytes(descr, shape, values), "npy");
}

//! The rule both npy tools apply to `cu_seqlens`: an integer array (int32 or int64), 1-D, at least
//! [0, tokens], starting at 0, non-decreasing, ending at `tokens`, each offset below 2^31.
//! Zero-length sequences (repeated offsets) are allowed: they hold no token and produce no
//! output row. Errors name `what` and the offending entry.
inline std::vector<std::int64_t> cu_seqlens_from_npy(const npy_array& a, std::int64_t tokens,
                                                     std::string_view what) {
  const auto fail = [&](const std::string& message) {
    return error(status_code::invalid_length, fmt::format("{} {}", what, message));
  };
  if (!a.is_integer())
    throw fail(fmt::format("has dtype {}; expected an integer dtype (<i4 or <i8)", a.descr));
  if (a.shape.size() != 1)
    throw fail(fmt::format("has shape {}; expected one dimension [sequences + 1]", a.shape_text()));
  if (a.shape[0] < 2)
    throw fail(
        fmt::format("has {} entries; expected at least 2 (0 and the token count)", a.shape[0]));
  auto offsets = a.as<std::int64_t>(std::string(what));
  if (offsets.front() != 0)
    throw fail(fmt::format("[0] = {}; must be 0", offsets.front()));
  for (std::size_t i = 0; i + 1 < offsets.size(); ++i)
    if (offsets[i + 1] < offsets[i])
      throw fail(fmt::format("[{}] = {} is below [{}] = {}: sequence {} would have a negative "
                             "length",
                             i + 1, offsets[i + 1], i, offsets[i], i));
  if (offsets.back() != tokens)
    throw fail(
        fmt::format("ends at {}; must end at the {} tokens of the input", offsets.back(), tokens));
  if (tokens > std::numeric_limits<std::int32_t>::max())
    throw fail(fmt::format("ends at {}; the tools take at most 2^31 - 1 tokens", tokens));
  return offsets;
}

//! The compute dtype of a tool's float inputs: every one must have the same dtype (float16,
//! float32 or float64); integer arrays are refused. Returns that dtype.
inline std::string
common_float_dtype(std::initializer_list<std::pair<std::string_view, const npy_array*>> inputs) {
  std::string descr;
  std::string_view first;
  for (const auto& [name, a] : inputs) {
    if (!a)
      continue;
    if (!a->is_float())
      throw error(
          status_code::invalid_length,
          fmt::format("{} has dtype {}; expected a float dtype (<f2, <f4 or <f8)", name, a->descr));
    if (descr.empty()) {
      descr = a->descr, first = name;
    } else if (a->descr != descr) {
      throw error(status_code::invalid_length,
                  fmt::format("{} has dtype {} but {} has {}: give every float input one dtype",
                              name, a->descr, first, descr));
    }
  }
  return descr;
}

} // namespace dcpp
