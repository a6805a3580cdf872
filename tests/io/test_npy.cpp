// Tests for include/dcpp/io/npy.hpp (a strict reader: hostile headers refused before anything is
// allocated, the cu_seqlens and dtype rules of the npy tools) and include/dcpp/io/file_input.hpp.
#include "../support.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dcpp/io/npy.hpp"

namespace {

//! A .npy file of `data_bytes` bytes of data after the header text `dict` (version `major`).
std::string npy_with(const std::string& dict, std::size_t data_bytes, int major = 1) {
  std::string header = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string bytes("\x93NUMPY", 6);
  bytes.push_back(static_cast<char>(major));
  bytes.push_back('\0');
  for (std::size_t i = 0; i < (major == 1 ? 2u : 4u); ++i)
    bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return bytes + header + std::string(data_bytes, '\x01');
}

std::string error_of(std::string_view bytes) {
  try {
    (void)dcpp::parse_npy(bytes, "a.npy");
  } catch (const dcpp::error& e) {
    return e.what();
  }
  return "no error";
}

std::string dict(const std::string& descr, const std::string& shape) {
  return fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
}

} // namespace

TEST_CASE("npy: written arrays read back at awkward shapes, every dtype the tools take") {
  std::mt19937_64 rng(31);
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{}, {0}, {1}, {7}, {3, 5}, {2, 0, 4}, {5, 3, 1}, {1, 1, 1, 1}}) {
    std::int64_t n = 1;
    for (const auto d : shape)
      n *= d;
    std::vector<float> f(static_cast<std::size_t>(n));
    std::vector<std::int64_t> i(f.size());
    for (std::size_t k = 0; k < f.size(); ++k)
      f[k] = static_cast<float>(static_cast<double>(rng() % 2001) / 7.0 - 100.0),
      i[k] = static_cast<std::int64_t>(rng() % 100000) - 50000;
    const auto a = dcpp::parse_npy(dcpp::npy_bytes("<f4", shape, f), "f.npy");
    CHECK(a.descr == "<f4");
    CHECK(a.shape == shape);
    CHECK(a.as<float>("f") == f);
    const auto b = dcpp::parse_npy(dcpp::npy_bytes("<i8", shape, i), "i.npy");
    CHECK(b.as<std::int64_t>("i") == i);
    CHECK(b.is_integer());
  }
}

TEST_CASE("npy: headers as NumPy writes them (either quote, any key order, versions 2 and 3)") {
  const auto a = dcpp::parse_npy(
      npy_with("{\"shape\": (2,3), \"fortran_order\": False, \"descr\": \"<f8\"}", 48, 2), "v2");
  CHECK(a.descr == "<f8");
  CHECK(a.shape == std::vector<std::int64_t>{2, 3});
  CHECK(dcpp::parse_npy(npy_with(dict("<i4", "(4,)"), 16, 3), "v3").shape ==
        std::vector<std::int64_t>{4});
  CHECK(dcpp::parse_npy(npy_with(dict("=f2", "()"), 2), "scalar").descr == "<f2");
}

TEST_CASE("npy: hostile headers are refused, naming the file and the problem, before allocating") {
  CHECK(error_of("") == "a.npy: not a .npy file (bad magic)");
  CHECK(error_of("PK\x03\x04 not numpy at all") == "a.npy: not a .npy file (bad magic)");
  CHECK(error_of(npy_with(dict("<f4", "(1,)"), 4, 4)) ==
        "a.npy: format version 4.0 is not 1.0, 2.0 or 3.0");
  // a version-2 header claiming 4 GB in a small file
  std::string huge("\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 14);
  CHECK(error_of(huge) == "a.npy: header length 4294967295 is past the limit of 1048576 bytes");
  huge[10] = huge[11] = '\0'; // 65,535 bytes: within the limit, past the file
  CHECK(error_of(huge) == "a.npy: header length 65535 runs past the end of the file (14 bytes)");
  // a declared shape far larger than the file: refused, not allocated
  CHECK(error_of(npy_with(dict("<f4", "(1000000000000,)"), 16)) ==
        "a.npy: holds 16 bytes of data; its shape [1000000000000] of dtype <f4 needs "
        "4000000000000");
  CHECK(error_of(npy_with(dict("<f4", "(3,)"), 16)) ==
        "a.npy: holds 16 bytes of data; its shape [3] of dtype <f4 needs 12");
  CHECK(error_of(npy_with(dict("<f4", "(3,)"), 8)) ==
        "a.npy: holds 8 bytes of data; its shape [3] of dtype <f4 needs 12");
  CHECK(error_of(npy_with(dict("<f4", "(4611686018427387904, 4611686018427387904)"), 0)) ==
        "a.npy: shape [4611686018427387904, 4611686018427387904] of dtype <f4 needs more than 2^62 "
        "bytes");
  CHECK(error_of(npy_with(dict("<f4", "(3, -2)"), 0)) ==
        "a.npy: shape dimension 1 is '-2', not a non-negative integer below 2^63");
  CHECK(error_of(npy_with(dict("<f4", "(3, x)"), 0)) ==
        "a.npy: shape dimension 1 is 'x', not a non-negative integer below 2^63");
  CHECK(error_of(npy_with(dict("<f4", "(99999999999999999999,)"), 0)) ==
        "a.npy: shape dimension 0 is '99999999999999999999', not a non-negative integer below "
        "2^63");
  CHECK(error_of(npy_with(dict(">f4", "(1,)"), 4)) ==
        "a.npy: dtype '>f4' is big-endian; only little-endian is read");
  CHECK(error_of(npy_with(dict("<c8", "(1,)"), 8)) ==
        "a.npy: dtype '<c8' is not one of <f2 <f4 <f8 <i4 <i8");
  CHECK(error_of(npy_with(dict("<fx", "(1,)"), 8)) ==
        "a.npy: dtype '<fx' is not one of <f2 <f4 <f8 <i4 <i8");
  CHECK(error_of(npy_with("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", 4)) ==
        "a.npy: Fortran order is not supported (write the array C-contiguous)");
  CHECK(error_of(npy_with("{'descr': '<f4', 'shape': (1,), }", 4)) ==
        "a.npy: header has no 'fortran_order'");
  CHECK(error_of(npy_with("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                          "'shape': (1,)}",
                          4)) == "a.npy: header key 'descr' appears twice");
  CHECK(error_of(npy_with("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4)) ==
        "a.npy: unknown header key 'x'");
  CHECK(error_of(npy_with("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", 4))
            .find("expected ',' or '}'") != std::string::npos);
  // every prefix of a valid file is refused cleanly
  const std::string good = dcpp::npy_bytes("<f4", {3, 2}, std::vector<float>(6, 1.0f));
  for (std::size_t n = 0; n < good.size(); ++n)
    CHECK(error_of(good.substr(0, n)) != "no error");
}

TEST_CASE("npy: conversions are checked (int64 that does not fit int32)") {
  const auto a = dcpp::parse_npy(
      dcpp::npy_bytes("<i8", {2}, std::vector<std::int64_t>{1, std::int64_t{1} << 40}), "c.npy");
  CHECK_THROWS_WITH_AS((void)a.as<std::int32_t>("--cu-seqlens"),
                       "--cu-seqlens: element 1 = 1099511627776 does not fit the 32-bit integers "
                       "it is read as",
                       dcpp::error);
}

TEST_CASE("npy: one cu_seqlens rule for both tools") {
  const auto cu = [](const std::string& descr, std::vector<std::int64_t> shape, auto values) {
    return dcpp::parse_npy(dcpp::npy_bytes(descr, shape, values), "cu.npy");
  };
  using v32 = std::vector<std::int32_t>;
  using v64 = std::vector<std::int64_t>;
  // zero-length sequences are accepted; int32 and int64 alike
  CHECK(dcpp::cu_seqlens_from_npy(cu("<i4", {4}, v32{0, 3, 3, 9}), 9, "--cu-seqlens") ==
        v64{0, 3, 3, 9});
  CHECK(dcpp::cu_seqlens_from_npy(cu("<i8", {2}, v64{0, 9}), 9, "--cu-seqlens") == v64{0, 9});
  const auto error = [&](const dcpp::npy_array& a, std::int64_t tokens) -> std::string {
    try {
      (void)dcpp::cu_seqlens_from_npy(a, tokens, "--cu-seqlens");
    } catch (const dcpp::error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(error(cu("<f4", {3}, std::vector<float>{0.0f, 2.5f, 9.0f}), 9) ==
        "--cu-seqlens has dtype <f4; expected an integer dtype (<i4 or <i8)");
  CHECK(error(cu("<i4", {2, 2}, v32{0, 3, 3, 9}), 9) ==
        "--cu-seqlens has shape [2, 2]; expected one dimension [sequences + 1]");
  CHECK(error(cu("<i4", {1}, v32{0}), 0) ==
        "--cu-seqlens has 1 entries; expected at least 2 (0 and the token count)");
  CHECK(error(cu("<i4", {3}, v32{1, 3, 9}), 9) == "--cu-seqlens [0] = 1; must be 0");
  CHECK(error(cu("<i4", {4}, v32{0, 5, 3, 9}), 9) ==
        "--cu-seqlens [2] = 3 is below [1] = 5: sequence 1 would have a negative length");
  CHECK(error(cu("<i4", {3}, v32{0, 3, 8}), 9) ==
        "--cu-seqlens ends at 8; must end at the 9 tokens of the input");
  CHECK(error(cu("<i8", {2}, v64{0, std::int64_t{1} << 31}), std::int64_t{1} << 31) ==
        "--cu-seqlens ends at 2147483648; the tools take at most 2^31 - 1 tokens");
}

TEST_CASE("npy: float inputs share one dtype; integer arrays are not float inputs") {
  const auto f4 = dcpp::parse_npy(dcpp::npy_bytes("<f4", {1}, std::vector<float>{1}), "a");
  const auto f2 = dcpp::parse_npy(dcpp::npy_bytes("<f2", {1}, std::vector<std::uint16_t>{0}), "b");
  const auto i4 = dcpp::parse_npy(dcpp::npy_bytes("<i4", {1}, std::vector<std::int32_t>{1}), "c");
  CHECK(dcpp::common_float_dtype({{"--x", &f4}, {"--w", &f4}, {"--b", nullptr}}) == "<f4");
  CHECK_THROWS_WITH_AS(dcpp::common_float_dtype({{"--x", &f4}, {"--w", &f2}}),
                       "--w has dtype <f2 but --x has <f4: give every float input one dtype",
                       dcpp::error);
  CHECK_THROWS_WITH_AS(dcpp::common_float_dtype({{"--x", &i4}}),
                       "--x has dtype <i4; expected a float dtype (<f2, <f4 or <f8)", dcpp::error);
}

TEST_CASE("npy: read_npy reads the header first and no further than the data it declares") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_npy_stream_test";
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "a.npy").string();
  const auto read_error = [&](const std::string& path) {
    try {
      (void)dcpp::read_npy(path);
    } catch (const dcpp::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // from a file, every case says what parse_npy says of the same bytes, with the file's name
  const std::string good = dcpp::npy_bytes("<f4", {3, 2}, std::vector<float>(6, 1.0f));
  std::vector<std::string> cases = {
      std::string("\x93NUMPY\x02\x00\xff\xff\x0f\x00{}", 14),
      npy_with(dict("<f4", "(1000000000000,)"), 16),
      npy_with(dict("<f4", "(3,)"), 16),
      npy_with(dict("<f4", "(3,)"), 8),
      npy_with(dict("<c8", "(1,)"), 8),
      npy_with(dict("<f4", "(1,)"), 4, 4),
      good,
      npy_with(dict("<f4", "(3,)"), 12, 2),
      npy_with(dict("<f4", "(0,)"), 0),
      npy_with(dict("<f4", "(0,)"), 1),
  };
  for (std::size_t n = 0; n < good.size(); ++n)
    cases.push_back(good.substr(0, n));
  for (const auto& bytes : cases) {
    dcpp::write_file_atomically(file, bytes, "test");
    std::string expected = "no error";
    try {
      (void)dcpp::parse_npy(bytes, file);
    } catch (const dcpp::error& e) {
      expected = e.what();
    }
    CHECK(read_error(file) == expected);
  }
  dcpp::write_file_atomically(file, good, "test");
  CHECK(dcpp::read_npy(file).data == dcpp::parse_npy(good, "x").data);
  // a header past the limit is refused before it is read
  std::string big("\x93NUMPY\x02\x00\x01\x00\x10\x00{}", 14);
  CHECK(error_of(big) == "a.npy: header length 1048577 is past the limit of 1048576 bytes");
  // data larger than the limit is refused before it is read
  CHECK_THROWS_WITH_AS((void)dcpp::read_npy(file, 8),
                       fmt::format("npy input: '{}': its shape [3, 2] of dtype <f4 needs 24 bytes; "
                                   "the limit is 8",
                                   file)
                           .c_str(),
                       dcpp::error);
  // an endless device stops at its first bytes
  CHECK(read_error("/dev/zero") == "/dev/zero: not a .npy file (bad magic)");
  // a pipe: a valid array, then one with bytes past its data, then one that ends early
  const std::string fifo = (dir / "pipe.npy").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const auto& [bytes, expected] : std::vector<std::pair<std::string, std::string>>{
           {good, "no error"},
           {good + std::string(1000, 'x'),
            fifo + ": holds more than 24 bytes of data; its shape [3, 2] of dtype <f4 needs 24"},
           {good.substr(0, good.size() - 3),
            fifo + ": holds 21 bytes of data; its shape [3, 2] of dtype <f4 needs 24"}}) {
    // fewer bytes than a pipe holds: the writer never waits for the reader to drain it
    std::thread writer([&, bytes = bytes] {
      std::ofstream out(fifo, std::ios::binary);
      out << bytes;
    });
    CHECK(read_error(fifo) == expected);
    writer.join();
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("file_input: a directory, a missing file and a too-large file are named errors") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_file_input_test";
  std::filesystem::create_directories(dir);
  CHECK_THROWS_WITH_AS(
      (void)dcpp::read_npy(dir.string()),
      fmt::format("npy input: cannot read '{}': Is a directory", dir.string()).c_str(),
      dcpp::error);
  CHECK_THROWS_WITH_AS(
      (void)dcpp::read_file((dir / "none").string(), "--x"),
      fmt::format("--x: cannot open '{}': No such file or directory", (dir / "none").string())
          .c_str(),
      dcpp::error);
  dcpp::write_file_atomically((dir / "t.txt").string(), "0123456789", "test");
  CHECK(dcpp::read_file((dir / "t.txt").string(), "t") == "0123456789");
  CHECK_THROWS_WITH_AS(
      (void)dcpp::read_file((dir / "t.txt").string(), "t", 4),
      fmt::format("t: '{}' holds 10 bytes; the limit is 4", (dir / "t.txt").string()).c_str(),
      dcpp::error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("file_input: text refuses a NUL byte where it is read, binary keeps it") {
  // dcpp-plan /dev/zero read until the memory ran out; a binary file given for lengths was read
  // whole before its first line was refused
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_file_input_nul";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "n.txt").string();
  const auto text = dcpp::file_content::text;
  dcpp::write_file_atomically(path, std::string("100\n\0\n200\n", 10), "test");
  CHECK(dcpp::read_file(path, "input").size() == 10);
  CHECK_THROWS_WITH_AS(
      (void)dcpp::read_file(path, "input", dcpp::input_limit, text),
      fmt::format("input: '{}' holds a NUL byte (byte 4): it is not text", path).c_str(),
      dcpp::error);
  // past the first read of 64 KiB: the byte counts from the start of the file
  dcpp::write_file_atomically(path, std::string(70000, '7') + '\0', "test");
  CHECK_THROWS_WITH_AS(
      (void)dcpp::read_file(path, "input", dcpp::input_limit, text),
      fmt::format("input: '{}' holds a NUL byte (byte 70000): it is not text", path).c_str(),
      dcpp::error);
  dcpp::write_file_atomically(path, std::string(70000, '7'), "test");
  CHECK(dcpp::read_file(path, "input", dcpp::input_limit, text) == std::string(70000, '7'));
  // an endless device stops at its first block
  CHECK_THROWS_WITH_AS((void)dcpp::read_file("/dev/zero", "input", dcpp::input_limit, text),
                       "input: '/dev/zero' holds a NUL byte (byte 0): it is not text", dcpp::error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("staged_outputs: all outputs appear together or none, existing files untouched") {
  const auto dir = std::filesystem::temp_directory_path() / "dcpp_staged_outputs_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = [&](const char* name) { return (dir / name).string(); };
  dcpp::write_file_atomically(path("a.npy"), "old a", "test");
  {
    dcpp::staged_outputs out("--out-dir");
    out.add(path("a.npy"), "new a");
    // the second target is a directory: staging fails, the first was never renamed
    std::filesystem::create_directories(dir / "b.npy");
    CHECK_THROWS_AS(out.add(path("b.npy"), "new b"), dcpp::error);
  }
  CHECK(dcpp::read_file(path("a.npy"), "a") == "old a");
  {
    dcpp::staged_outputs out("--out-dir");
    out.add(path("c.npy"), "c");
    CHECK_THROWS_WITH_AS(
        out.add(path("c.npy"), "c again"),
        fmt::format("--out-dir: two outputs name the same file '{}'", path("c.npy")).c_str(),
        dcpp::error);
  }
  CHECK_FALSE(std::filesystem::exists(dir / "c.npy"));
  {
    dcpp::staged_outputs out("--out-dir");
    out.add(path("a.npy"), "new a");
    out.add(path("d.npy"), "d");
    out.commit();
  }
  CHECK(dcpp::read_file(path("a.npy"), "a") == "new a");
  CHECK(dcpp::read_file(path("d.npy"), "d") == "d");
  // nothing staged is left behind
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir))
    ++files;
  CHECK(files == 3); // a.npy, b.npy (the directory), d.npy
  std::filesystem::remove_all(dir);
}

TEST_CASE("output_directory: what a failed run created is removed again, a kept one stays") {
  const auto root = std::filesystem::temp_directory_path() / "dcpp_output_directory_test";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  {
    dcpp::output_directory d(root / "x" / "y" / "z", "--out-dir");
    CHECK(std::filesystem::is_directory(root / "x" / "y" / "z"));
  }
  CHECK_FALSE(std::filesystem::exists(root / "x"));
  {
    dcpp::output_directory d(root / "x" / "y", "--out-dir");
    d.keep();
  }
  CHECK(std::filesystem::is_directory(root / "x" / "y"));
  dcpp::write_file_atomically((root / "file").string(), "f", "test");
  CHECK_THROWS_WITH_AS(
      dcpp::output_directory(root / "file" / "sub", "--out-dir"),
      fmt::format("--out-dir: '{}' is not a directory", (root / "file").string()).c_str(),
      dcpp::error);
  std::filesystem::remove_all(root);
}
