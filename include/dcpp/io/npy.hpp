// NumPy .npy files (format versions 1.0-3.0, little-endian, C order) for the checkable example
// programs: read into bytes + dtype + shape, convert to the element type a kernel takes, write.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dcpp/core/float16.hpp"
#include "dcpp/error.hpp"
#include "dcpp/io/atomic_file.hpp"

namespace dcpp {

//! An array as stored: `descr` is NumPy's dtype string ('<f4', '<f2', '<i4', ...).
struct npy_array {
  std::string descr;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> data;

  [[nodiscard]] std::int64_t elements() const {
    return std::accumulate(shape.begin(), shape.end(), std::int64_t{1},
                           [](std::int64_t a, std::int64_t b) { return a * b; });
  }
  [[nodiscard]] std::size_t item_size() const {
    return descr.size() >= 3 ? static_cast<std::size_t>(std::stoi(descr.substr(2))) : 0;
  }

  //! The values converted to T (float, double, half, bfloat16 or int32/int64), from float16/32/64
  //! or int32/64 storage. Throws naming the file's dtype when it cannot convert.
  template <class T>
  [[nodiscard]] std::vector<T> as(const std::string& what) const {
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
      } else if (descr == "<i8") {
        std::int64_t k;
        std::memcpy(&k, p, 8);
        v = static_cast<double>(k);
      } else {
        throw error(status_code::parse_error,
                    fmt::format("{}: dtype '{}' is not one of <f2 <f4 <f8 <i4 <i8", what, descr));
      }
      if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
        out[i] = from_float<T>(static_cast<float>(v));
      else
        out[i] = static_cast<T>(v);
    }
    return out;
  }
};

//! Reads `path`; errors name the file and what is wrong with it.
inline npy_array read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw error(status_code::parse_error, fmt::format("{}: cannot open", path));
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw error(status_code::parse_error, fmt::format("{}: not a .npy file (bad magic)", path));
  std::uint32_t header_length = 0;
  if (magic[6] == 1) {
    unsigned char l[2];
    in.read(reinterpret_cast<char*>(l), 2);
    header_length = l[0] | (l[1] << 8);
  } else {
    unsigned char l[4];
    in.read(reinterpret_cast<char*>(l), 4);
    header_length = l[0] | (l[1] << 8) | (l[2] << 16) | (static_cast<std::uint32_t>(l[3]) << 24);
  }
  std::string header(header_length, '\0');
  if (!in.read(header.data(), header_length))
    throw error(status_code::parse_error, fmt::format("{}: truncated header", path));
  auto field = [&](const std::string& key) {
    const auto at = header.find("'" + key + "'");
    if (at == std::string::npos)
      throw error(status_code::parse_error, fmt::format("{}: header has no '{}'", path, key));
    return header.find(':', at) + 1;
  };
  npy_array a;
  {
    const auto start = header.find('\'', field("descr")) + 1;
    a.descr = header.substr(start, header.find('\'', start) - start);
    if (a.descr.size() > 1 && a.descr[0] == '|')
      a.descr[0] = '<';
  }
  if (const auto at = header.find_first_not_of(' ', field("fortran_order"));
      at != std::string::npos && header.compare(at, 4, "True") == 0)
    throw error(status_code::parse_error, fmt::format("{}: Fortran order is not supported", path));
  {
    const auto open = header.find('(', field("shape")), close = header.find(')', open);
    std::string dims = header.substr(open + 1, close - open - 1);
    std::size_t pos = 0;
    while (pos < dims.size()) {
      const auto comma = dims.find(',', pos);
      const std::string item =
          dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      if (item.find_first_not_of(' ') != std::string::npos)
        a.shape.push_back(std::stoll(item));
      if (comma == std::string::npos)
        break;
      pos = comma + 1;
    }
  }
  if (a.descr.empty() || (a.descr[0] != '<' && a.descr[0] != '='))
    throw error(status_code::parse_error,
                fmt::format("{}: dtype '{}' is not little-endian", path, a.descr));
  a.data.resize(static_cast<std::size_t>(a.elements()) * a.item_size());
  if (!in.read(reinterpret_cast<char*>(a.data.data()), static_cast<std::streamsize>(a.data.size())))
    throw error(
        status_code::parse_error,
        fmt::format("{}: holds fewer than the {} bytes its shape needs", path, a.data.size()));
  return a;
}

//! Writes `values` with dtype `descr` ('<f4', '<f2', '<i4') and `shape` (format 1.0).
template <class T>
void write_npy(const std::string& path, const std::string& descr,
               const std::vector<std::int64_t>& shape, const std::vector<T>& values) {
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
  // staged beside the target and renamed into place: a failed write leaves no partial file
  write_file_atomically(path, bytes, "npy");
}

} // namespace dcpp
