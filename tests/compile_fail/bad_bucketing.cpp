// Must not compile: a bucketing policy that returns the wrong type.
#include "dcpp/planner/planner.hpp"

struct broken_bucketing {
  int buckets(const dcpp::problem&, std::span<const double>) const { return 0; }
};

int main() {
  dcpp::planner<dcpp::length_squared_cost, dcpp::balanced_with<broken_bucketing>> p(
      dcpp::plan_options{});
  (void)p;
}
