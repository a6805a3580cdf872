// Umbrella header: the whole host-side library.
#pragma once

#include "dcpp/core/config.hpp" // first: below C++20 its #error is the first message

#include "dcpp/comm/plan_communicator.hpp"
#include "dcpp/core/math.hpp"
#include "dcpp/error.hpp"
#include "dcpp/io/batch_input.hpp"
#include "dcpp/io/plan_json.hpp"
#include "dcpp/io/plan_svg.hpp"
#include "dcpp/io/plan_table.hpp"
#include "dcpp/planner/bounds/budget_lower_bound.hpp"
#include "dcpp/planner/bucketing.hpp"
#include "dcpp/planner/calibrated_cost.hpp"
#include "dcpp/planner/costs.hpp"
#include "dcpp/planner/estimator.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/packing.hpp"
#include "dcpp/planner/packing/balanced.hpp"
#include "dcpp/planner/packing/megatron_greedy.hpp"
#include "dcpp/planner/packing/static_cp.hpp"
#include "dcpp/planner/packing/uniform_cp.hpp"
#include "dcpp/planner/plan.hpp"
#include "dcpp/planner/plan_hash.hpp"
#include "dcpp/planner/planner.hpp"
#include "dcpp/planner/transformer_cost.hpp"
#include "dcpp/planner/validate.hpp"
