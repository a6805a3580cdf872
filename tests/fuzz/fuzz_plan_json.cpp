// libFuzzer target: the dcpp-plan/1 reader (plan and options) and, when both parse, the plan's
// validation against its options: a hostile plan file must give a plan, a failed check or a
// dcpp::error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dcpp/io/plan_json.hpp"
#include "dcpp/planner/validate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto p = dcpp::read_plan_json(text, "fuzz.json");
    const auto o = dcpp::read_plan_options_json(text, "fuzz.json");
    (void)dcpp::validate(p, o);
  } catch (const dcpp::error&) {
  }
  return 0;
}
