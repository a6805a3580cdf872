// Tests for include/dcpp/io/batch_input.hpp.
#include "../support.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "dcpp/io/batch_input.hpp"
#include "dcpp/io/by_name.hpp"

namespace {
dcpp::batch_input read(const std::string& text) {
  std::istringstream in(text);
  return dcpp::read_batch(in, "batch.txt");
}
std::string error_of(const std::string& text) {
  try {
    (void)read(text);
  } catch (const dcpp::error& e) {
    return e.what();
  }
  return "no error";
}
} // namespace

TEST_CASE("batch_input: text with comments and blank lines") {
  const auto b = read("# lengths\n100\n\n  2048  # a long one\r\n7\n");
  CHECK(b.lengths == std::vector<std::int64_t>{100, 2048, 7});
  CHECK_FALSE(b.world_size.has_value());
}

TEST_CASE("batch_input: text errors name the line") {
  CHECK(error_of("10\n20\nabc\n") == "batch.txt:3: 'abc' is not an integer length");
  CHECK(error_of("10\n\n0\n") == "batch.txt:3: length = 0 must be positive");
  CHECK(error_of("10\n-5\n") == "batch.txt:2: length = -5 must be positive");
  CHECK(error_of("12.5\n") == "batch.txt:1: '12.5' is not an integer length");
  CHECK(error_of("99999999999999999999\n").find("not an integer") != std::string::npos);
  CHECK(error_of("# nothing\n\n") == "batch.txt: no sample lengths in the input");
  CHECK(error_of("") == "batch.txt: no sample lengths in the input");
}

TEST_CASE("batch_input: at most max_batch_samples lengths, text and JSON") {
  // the reader stops at the sample past the limit (an endless input filled the memory)
  const auto n = static_cast<std::size_t>(dcpp::max_batch_samples);
  std::string text;
  text.reserve(2 * n + 16);
  for (std::size_t i = 0; i < n; ++i)
    text += "7\n";
  CHECK(read(text).lengths.size() == n);
  text += "# one more\n\n8\n";
  CHECK(error_of(text) ==
        fmt::format("batch.txt:{}: a length past the limit of 16777216 samples", n + 3));
  if (dcpp_test::quick())
    return; // -O0 sanitized: 2^24 JSON numbers parse slowly; the text case covers the reader
  std::string json = "{\"seqlens\": [";
  json.reserve(2 * n + 32);
  for (std::size_t i = 0; i < n; ++i)
    json += "1,";
  json += "1]}";
  CHECK(error_of(json) ==
        "batch.txt: seqlens holds 16777217 lengths; the limit is 16777216 samples");
}

TEST_CASE("batch_input: a byte order mark is skipped, not read as part of the first value") {
  // (editors on Windows write one: the first length was refused as '\xEF\xBB\xBF100', a JSON
  // batch was read as text, and a calibration's first row was skipped as a header)
  const std::string bom = "\xEF\xBB\xBF";
  CHECK(read(bom + "100\n200\n").lengths == std::vector<std::int64_t>{100, 200});
  CHECK(read(bom + "{\"seqlens\": [5, 6]}").lengths == std::vector<std::int64_t>{5, 6});
  std::istringstream cal(bom + "1024,1,0.5\n2048,2,0.75\n");
  const auto rows = dcpp::read_calibration(cal, "cal.csv");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].length == 1024);
  // only at the start: elsewhere it is a character like another
  CHECK(error_of("100\n" + bom + "200\n") ==
        "batch.txt:2: '" + bom + "200' is not an integer length");
}

TEST_CASE("batch_input: a quoted line is cut and its control bytes escaped") {
  // a line of 100,000 digits was quoted whole in the message, a binary file's bytes raw
  CHECK(error_of(std::string(100000, '7') + "\n") ==
        "batch.txt:1: '" + std::string(40, '7') +
            "...' (100000 characters) is not an integer length");
  CHECK(error_of(std::string("12\x01\x1b[2Jx\x7f\n")) ==
        "batch.txt:1: '12\\x01\\x1b[2Jx\\x7f' is not an integer length");
  // cut by characters, never inside one: 50 two-byte characters, of which 40 are shown
  std::string e50;
  for (int i = 0; i < 50; ++i)
    e50 += "\xC3\xA9";
  CHECK(error_of(e50) ==
        "batch.txt:1: '" + e50.substr(0, 80) + "...' (50 characters) is not an integer length");
  CHECK(error_of("{\"seqlens\": [\"" + e50 + "\"]}") ==
        "batch.txt: seqlens[0] = \"" + e50.substr(0, 80) +
            "...\" (50 characters) must be a positive integer length");
  std::istringstream cal("1024,1,0.5\n" + std::string(5000, 'x') + ",1,2\n");
  CHECK_THROWS_WITH_AS(dcpp::read_calibration(cal, "cal.csv"),
                       ("cal.csv:2: '" + std::string(40, 'x') +
                        "...' (5004 characters) is not 'length,cp,seconds' nor "
                        "'microbatch,seconds'")
                           .c_str(),
                       dcpp::error);
}

TEST_CASE("batch_input: JSON workloads with their settings") {
  const auto b = read(R"({"name": "w", "seqlens": [5, 6], "total_gpus": 24,
                          "max_seq_len_per_rank": 4096, "min_cp_size": 1,
                          "vpp_microbatch_group_size": null})");
  CHECK(b.name == "w");
  CHECK(b.lengths == std::vector<std::int64_t>{5, 6});
  CHECK(*b.world_size == 24);
  CHECK(*b.max_tokens_per_rank == 4096);
  CHECK(*b.min_cp == 1);
  CHECK_FALSE(b.microbatch_multiple.has_value());
}

TEST_CASE("batch_input: JSON errors name the field and index") {
  CHECK(error_of(R"({"name": "w"})") == "batch.txt: missing array field 'seqlens'");
  CHECK(error_of(R"({"seqlens": 5})") ==
        "batch.txt: field 'seqlens' = 5 must be an array of lengths");
  CHECK(error_of(R"({"seqlens": [1, 2, "x"]})") ==
        "batch.txt: seqlens[2] = \"x\" must be a positive integer length");
  CHECK(error_of(R"({"seqlens": [1, 0]})") ==
        "batch.txt: seqlens[1] = 0 must be a positive integer length");
  CHECK(error_of(R"({"seqlens": []})") == "batch.txt: no sample lengths in the input");
  CHECK(error_of(R"({"seqlens": [1], "total_gpus": -2})") ==
        "batch.txt: field 'total_gpus' = -2 must be an integer from 1 to 16777216");
  CHECK(error_of("{ nope").find("not valid JSON") != std::string::npos);
}

TEST_CASE("batch_input: a key twice and an unknown field are refused, naming them") {
  // planned one sample of 300 before: the later value won without a word
  CHECK(error_of(R"({"seqlens": [100, 200], "seqlens": [300]})") ==
        "batch.txt: key 'seqlens' appears twice in one object");
  CHECK(error_of(R"({"seqlens": [1], "x": {"a": 1, "b": 2, "a": 3}})") ==
        "batch.txt: key 'a' appears twice in one object");
  // a typo planned with the default world before
  CHECK(error_of(R"({"seqlens": [1], "total_gpu": 64})") ==
        "batch.txt: unknown field 'total_gpu'; the fields are seqlens, total_gpus, world_size, "
        "max_seq_len_per_rank, max_tokens_per_rank, min_cp_size, vpp_microbatch_group_size, name, "
        "description, seed, pad_multiple");
  CHECK(error_of(R"({"lengths": [1]})").find("unknown field 'lengths'") != std::string::npos);
  // the same key in two objects is no repeat; the shared workloads' provenance fields are known
  const auto b = read(R"({"seqlens": [7], "description": {"seqlens": 1}, "seed": 3,
                          "pad_multiple": 8})");
  CHECK(b.lengths == std::vector<std::int64_t>{7});
}

TEST_CASE("batch_input: a calibration file past 64 MiB is refused before it is read") {
  // an endless stream (<(yes 4096,1,0.3)) was read until the memory ran out
  const auto path = std::filesystem::temp_directory_path() / "dcpp_huge_calibration.csv";
  std::filesystem::remove(path);
  std::ofstream(path) << "4096,1,0.3\n";
  std::filesystem::resize_file(path, dcpp::calibration_input_limit + 1);
  try {
    (void)dcpp::estimator_from_spec("calibrated:" + path.string(), {});
    FAIL("no error");
  } catch (const dcpp::error& e) {
    CHECK(std::string(e.what()) ==
          fmt::format("--estimator calibrated: '{}' holds 67108865 bytes; the limit is 67108864",
                      path.string()));
  }
  std::filesystem::remove(path);
}

TEST_CASE("batch_input: calibration CSV") {
  std::istringstream ok("length,cp,seconds\n# measured\n1024,1,0.01\n2048, 2, 0.011\n");
  const auto rows = dcpp::read_calibration(ok, "cal.csv");
  REQUIRE(rows.size() == 2);
  CHECK(rows[1].length == 2048);
  CHECK(rows[1].cp == 2);
  CHECK(rows[1].seconds == 0.011);
  std::istringstream bad("1024,1,0.01\n2048,x,0.2\n");
  CHECK_THROWS_WITH_AS(dcpp::read_calibration(bad, "cal.csv"),
                       "cal.csv:2: '2048,x,0.2' is not 'length,cp,seconds' nor "
                       "'microbatch,seconds'",
                       dcpp::error);
  // micro-batch rows, anywhere among the sample rows
  std::istringstream with_overhead("microbatch, 0.004\n1024,1,0.01\nmicrobatch,0.006\n");
  const auto mixed = dcpp::read_calibration(with_overhead, "cal.csv");
  REQUIRE(mixed.size() == 3);
  CHECK(mixed[0].microbatch);
  CHECK(mixed[0].seconds == 0.004);
  CHECK_FALSE(mixed[1].microbatch);
  CHECK(mixed[2].microbatch);
  std::istringstream bad_overhead("1024,1,0.01\nmicrobatch,soon\n");
  CHECK_THROWS_WITH_AS(dcpp::read_calibration(bad_overhead, "cal.csv"),
                       "cal.csv:2: 'microbatch,soon' is not 'microbatch,seconds'", dcpp::error);
  std::istringstream bad_cp("1024,0,0.01\n");
  CHECK_THROWS_WITH_AS(dcpp::read_calibration(bad_cp, "cal.csv"),
                       "cal.csv:1: cp = 0 must be in [1, 2147483647]", dcpp::error);
  // the values the fit would refuse by row number, named here by file and line
  for (const auto& [text, message] : {
           std::pair{"1024,1,0.01\n2048,2,nan\n",
                     "cal.csv:2: seconds = nan must be a finite time > 0"},
           std::pair{"1024,1,-0.5\n", "cal.csv:1: seconds = -0.5 must be a finite time > 0"},
           std::pair{"# t\n1024,1,0\n", "cal.csv:2: seconds = 0 must be a finite time > 0"},
           std::pair{"1024,1,inf\n", "cal.csv:1: seconds = inf must be a finite time > 0"},
           std::pair{"1024,1,1\nmicrobatch,-inf\n",
                     "cal.csv:2: seconds = -inf must be a finite time > 0"},
           std::pair{"1024,1,1\n0,2,0.5\n", "cal.csv:2: length = 0 must be positive"},
           std::pair{"1024,1,1\n-5,2,0.5\n", "cal.csv:2: length = -5 must be positive"},
       }) {
    std::istringstream in(text);
    CHECK_THROWS_WITH_AS(dcpp::read_calibration(in, "cal.csv"), message, dcpp::error);
  }
  std::istringstream extra("1,1,1,1\n");
  CHECK_THROWS_WITH_AS(dcpp::read_calibration(extra, "cal.csv"), doctest::Contains("got more"),
                       dcpp::error);
  std::istringstream empty("# none\n");
  CHECK_THROWS_WITH_AS(dcpp::read_calibration(empty, "cal.csv"), "cal.csv: no calibration rows",
                       dcpp::error);
}

TEST_CASE("batch_input: hostile JSON is a named error (found by the fuzzer)") {
  // a number past double's range: nlohmann throws out_of_range, not parse_error
  CHECK(error_of("{\"seqlens\": [1], \"x\": 5555e99999}").find("batch.txt: not valid JSON") == 0);
  CHECK(error_of("{\"seqlens\": [" + std::string(1000, '[') + std::string(1000, ']') + "]}") ==
        "batch.txt: JSON nested deeper than 64 levels");
  CHECK(error_of("{\"seqlens\": [1, {\"a\": 2}]}") ==
        "batch.txt: seqlens[1] = an object (1 fields) must be a positive integer length");
  CHECK(error_of("{\"seqlens\": [\"" + std::string(100, 'x') + "\"]}") ==
        "batch.txt: seqlens[0] = \"" + std::string(40, 'x') +
            "...\" (100 characters) must be a positive integer length");
  CHECK(error_of("{\"seqlens\": [1], \"min_cp_size\": 2147483648}") ==
        "batch.txt: field 'min_cp_size' = 2147483648 must be an integer from 1 to 16777216");
}

TEST_CASE("batch_input: a JSON setting past the planner's limit names the field") {
  // each field takes 1 to the limit of the option it sets (dcpp/planner/options.hpp); past it,
  // the error names the input's field, not the option
  struct field_limit {
    const char* key;
    std::int64_t limit;
  };
  const field_limit fields[] = {
      {"total_gpus", dcpp::max_world_size},
      {"world_size", dcpp::max_world_size},
      {"max_seq_len_per_rank", dcpp::max_tokens_per_rank_limit},
      {"max_tokens_per_rank", dcpp::max_tokens_per_rank_limit},
      {"min_cp_size", dcpp::max_world_size},
      {"vpp_microbatch_group_size", dcpp::max_microbatch_multiple},
  };
  for (const field_limit& f : fields) {
    CAPTURE(f.key);
    const auto with = [&](std::int64_t v) {
      return fmt::format(R"({{"seqlens": [1], "{}": {}}})", f.key, v);
    };
    CHECK_NOTHROW(read(with(f.limit)));
    CHECK_NOTHROW(read(with(1)));
    for (const std::int64_t bad : {f.limit + 1, f.limit * 4 + 3, std::int64_t{0}})
      CHECK(error_of(with(bad)) == fmt::format("batch.txt: field '{}' = {} must be an integer "
                                               "from 1 to {}",
                                               f.key, bad, f.limit));
  }
  const auto b = read(R"({"seqlens": [1], "vpp_microbatch_group_size": 1024,
                          "max_seq_len_per_rank": 68719476736})");
  CHECK(*b.microbatch_multiple == 1024);
  CHECK(*b.max_tokens_per_rank == dcpp::max_tokens_per_rank_limit);
}
