// Must not compile: an estimator whose cost takes the wrong arguments.
#include "dcpp/planner/planner.hpp"

struct broken_cost {
  double cost(double length) const { return length; }
};

int main() {
  dcpp::planner<broken_cost> p(dcpp::plan_options{});
  (void)p;
}
