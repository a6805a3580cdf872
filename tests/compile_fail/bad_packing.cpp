// Must not compile: a packing policy without pack().
#include "dcpp/planner/planner.hpp"

struct broken_packing {
  static constexpr std::string_view name = "broken";
};

int main() {
  dcpp::planner<dcpp::length_squared_cost, broken_packing> p(dcpp::plan_options{});
  (void)p;
}
