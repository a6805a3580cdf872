// The Python extension `dcpp._dcpp`: the host planner (every estimator and packing policy by
// name, a calibration fitted from rows or a CSV, a Python cost callable tabulated once per
// distinct length and size), the plan (groups as numpy arrays, JSON, SVG, validation, each rank's
// zigzag token route) and dcpp's errors as ValueError. The pure-Python layer (dcpp/__init__.py,
// megatron.py, verl.py) builds on it.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "dcpp/core/zigzag.hpp"
#include "dcpp/dcpp.hpp"
#include "dcpp/io/by_name.hpp"
#include "dcpp/route/route.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// ---------------------------------------------------------------------------------------------
// numpy arrays that own a copy of a vector

template <class T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> to_numpy(std::vector<T> values) {
  auto* heap = new std::vector<T>(std::move(values));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(heap->data(), {heap->size()}, owner);
}

using lengths_array = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::span<const std::int64_t> as_span(const lengths_array& a) {
  return {a.data(), a.shape(0)};
}

// ---------------------------------------------------------------------------------------------
// A cost table filled from a Python callable before planning (with the GIL), read while planning
// (without it)

struct cost_table {
  std::vector<std::int64_t> lengths; // ascending, distinct
  std::vector<std::int32_t> sizes;   // ascending
  std::vector<double> values;        // lengths x sizes; NaN where not asked
};

//! `cost(length, cp)` from the table. A query the table does not hold is an error, never a
//! silent call back into Python (the planner runs without the GIL).
struct table_cost {
  std::shared_ptr<const cost_table> table;

  [[nodiscard]] double cost(std::int64_t length, std::int32_t cp) const {
    const auto& t = *table;
    const auto l = std::lower_bound(t.lengths.begin(), t.lengths.end(), length);
    const auto c = std::lower_bound(t.sizes.begin(), t.sizes.end(), cp);
    if (l != t.lengths.end() && *l == length && c != t.sizes.end() && *c == cp) {
      const double v = t.values[static_cast<std::size_t>(l - t.lengths.begin()) * t.sizes.size() +
                                static_cast<std::size_t>(c - t.sizes.begin())];
      if (!std::isnan(v))
        return v;
    }
    throw dcpp::error(dcpp::status_code::invalid_option,
                      fmt::format("estimator: the planner asked for cost({}, {}), which the cost "
                                  "table does not hold",
                                  length, cp));
  }
};
static_assert(dcpp::workload_estimator<table_cost>);

//! Calls `fn(length, cp)` once per distinct length of the batch and legal size at or above that
//! length's smallest feasible size.
std::shared_ptr<const cost_table> tabulate(const nb::callable& fn, const dcpp::plan_options& o,
                                           std::span<const std::int64_t> lengths) {
  dcpp::throw_if_failed(dcpp::check_problem(o, lengths));
  const dcpp::problem pr = dcpp::make_problem(o, lengths);
  auto t = std::make_shared<cost_table>();
  t->sizes = pr.cp_sizes;
  std::vector<std::pair<std::int64_t, std::int32_t>> smallest; // (length, its smallest cp)
  smallest.reserve(pr.size());
  for (std::size_t s = 0; s < pr.size(); ++s)
    smallest.emplace_back(pr.lengths[s], pr.min_cp_of[s]);
  std::sort(smallest.begin(), smallest.end());
  smallest.erase(std::unique(smallest.begin(), smallest.end(),
                             [](const auto& a, const auto& b) { return a.first == b.first; }),
                 smallest.end());
  t->lengths.reserve(smallest.size());
  for (const auto& [length, cp] : smallest)
    t->lengths.push_back(length);
  t->values.assign(t->lengths.size() * t->sizes.size(), std::nan(""));
  for (std::size_t l = 0; l < smallest.size(); ++l)
    for (std::size_t c = 0; c < t->sizes.size(); ++c) {
      const std::int64_t length = smallest[l].first;
      const std::int32_t cp = t->sizes[c];
      if (cp < smallest[l].second)
        continue;
      const nb::object result = fn(length, cp);
      double value = 0;
      if (!nb::try_cast(result, value)) {
        if (nb::isinstance<nb::int_>(result) && !nb::isinstance<nb::bool_>(result)) {
          // an int past a double: its digits (a sign aside), not the digits themselves
          const std::string digits = nb::str(result).c_str();
          throw nb::value_error(
              fmt::format("estimator: cost({}, {}) returned an integer of {} digits, past the "
                          "largest double",
                          length, cp, digits.size() - (digits.front() == '-' ? 1 : 0))
                  .c_str());
        }
        // dcpp._shown cuts a long repr, as every message of the package does
        const std::string shown =
            nb::cast<std::string>(nb::module_::import_("dcpp").attr("_shown")(result));
        throw nb::value_error(
            fmt::format("estimator: cost({}, {}) returned {}, not a number", length, cp, shown)
                .c_str());
      }
      if (!std::isfinite(value) || value < 0)
        throw nb::value_error(fmt::format("estimator: cost({}, {}) = {}; a cost must be finite "
                                          "and >= 0",
                                          length, cp, value)
                                  .c_str());
      t->values[l * t->sizes.size() + c] = value;
    }
  // the contract of every estimator: no cost falls as the length grows (on one size); the
  // planner's bounds and searches rely on it
  for (std::size_t c = 0; c < t->sizes.size(); ++c) {
    std::size_t previous = t->lengths.size();
    for (std::size_t l = 0; l < t->lengths.size(); ++l) {
      const double value = t->values[l * t->sizes.size() + c];
      if (std::isnan(value))
        continue;
      if (previous < t->lengths.size() && value < t->values[previous * t->sizes.size() + c])
        throw nb::value_error(fmt::format("estimator: cost({}, {}) = {} is below cost({}, {}) = "
                                          "{}: a cost must not fall as the length grows",
                                          t->lengths[l], t->sizes[c], value, t->lengths[previous],
                                          t->sizes[c], t->values[previous * t->sizes.size() + c])
                                  .c_str());
      previous = l;
    }
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// A calibration, fitted once and reusable

struct calibration {
  dcpp::calibrated_cost fitted;
  std::string name;
};

calibration fit_rows(const nb::iterable& rows, std::optional<std::int32_t> gpus_per_node) {
  std::vector<dcpp::calibration_row> parsed;
  std::size_t index = 0;
  for (nb::handle row : rows) {
    ++index;
    // a field of another type (dcpp.fit_calibration names it; Calibration.from_rows called
    // directly raised RuntimeError 'std::bad_cast')
    std::vector<nb::object> fields;
    if (nb::isinstance<nb::str>(row) || !nb::try_cast(nb::borrow(row), fields))
      fields.clear();
    try {
      dcpp::calibration_row r;
      if (fields.size() == 2 && nb::isinstance<nb::str>(fields[0]) &&
          nb::cast<std::string>(fields[0]) == "microbatch") {
        r.microbatch = true;
        r.seconds = nb::cast<double>(fields[1]);
      } else if (fields.size() == 3) {
        r.length = nb::cast<std::int64_t>(fields[0]);
        const auto cp = nb::cast<std::int64_t>(fields[1]);
        if (cp < 1 || cp > std::numeric_limits<std::int32_t>::max())
          throw nb::value_error(fmt::format("rows[{}]: cp = {} must be in [1, {}]", index - 1, cp,
                                            std::numeric_limits<std::int32_t>::max())
                                    .c_str());
        r.cp = static_cast<std::int32_t>(cp);
        r.seconds = nb::cast<double>(fields[2]);
      } else {
        throw nb::value_error(fmt::format("rows[{}]: expected (length, cp, seconds) or "
                                          "('microbatch', seconds), got {}",
                                          index - 1, nb::repr(row).c_str())
                                  .c_str());
      }
      parsed.push_back(r);
    } catch (const nb::cast_error&) {
      throw nb::type_error(fmt::format("rows[{}]: expected (length, cp, seconds) with integer "
                                       "length and cp (64 bits) and a number of seconds, or "
                                       "('microbatch', seconds), got {}",
                                       index - 1, nb::repr(row).c_str())
                               .c_str());
    }
  }
  auto named = dcpp::calibrated_from_rows(parsed, gpus_per_node, "calibrated");
  return {std::get<dcpp::calibrated_cost>(std::move(named.estimator)), named.name};
}

calibration fit_csv(const std::string& path, std::optional<std::int32_t> gpus_per_node) {
  std::istringstream in(dcpp::read_file(path, "calibration", dcpp::calibration_input_limit,
                                        dcpp::file_content::text));
  auto named = dcpp::calibrated_from_rows(dcpp::read_calibration(in, path), gpus_per_node,
                                          "calibrated:" + path);
  return {std::get<dcpp::calibrated_cost>(std::move(named.estimator)), named.name};
}

// ---------------------------------------------------------------------------------------------
// The plan as Python sees it

struct py_plan {
  dcpp::plan plan;
  dcpp::plan_options options;
};

nb::dict metrics_dict(const dcpp::plan& p) {
  const auto& m = p.metrics;
  nb::dict d;
  d["estimated_step_time"] = m.estimated_step_time;
  d["lower_bound"] = m.lower_bound;
  d["efficiency"] = m.efficiency;
  d["plan_seconds"] = m.plan_seconds;
  d["microbatches"] = p.microbatches.size();
  d["min_microbatches"] = m.min_microbatches;
  d["microbatch_overhead"] = m.microbatch_overhead;
  d["max_rank_load"] = m.max_rank_load;
  d["mean_rank_load"] = m.mean_rank_load;
  d["idle_rank_slots"] = m.idle_rank_slots;
  return d;
}

//! One rank's part of micro-batch `mb`: its group, the THD layout and, per token of its buffer,
//! the global token index it receives (samples concatenated in batch order; -1 on padding) and
//! its position inside its sample (zigzag order, padding continuing past the real length).
nb::dict route_of(const py_plan& self, std::size_t mb, std::int32_t rank,
                  std::optional<std::int64_t> padding_unit) {
  const auto& p = self.plan;
  if (mb >= p.microbatches.size())
    throw nb::index_error(
        fmt::format("microbatch {} is out of range: the plan has {}", mb, p.microbatches.size())
            .c_str());
  if (rank < 0 || rank >= p.world_size)
    throw nb::index_error(
        fmt::format("rank {} is out of range: the plan has {} ranks", rank, p.world_size).c_str());
  const std::int64_t unit = padding_unit.value_or(self.options.padding_unit);
  if (unit < 1)
    throw nb::value_error(fmt::format("padding_unit = {} must be >= 1", unit).c_str());
  // every sample on "rank 0" at its offset in the concatenated batch: source offsets are then
  // global token indices
  std::vector<std::int64_t> counts(static_cast<std::size_t>(p.world_size), 0);
  counts[0] = static_cast<std::int64_t>(p.lengths.size());
  const auto origins = dcpp::sample_origins::from_counts(counts, p.lengths);
  const dcpp::rank_route route = dcpp::make_rank_route(p, origins, mb, rank, unit);
  const dcpp::thd_layout& l = route.layout;
  const auto tokens = static_cast<std::size_t>(l.tokens());
  std::vector<std::int64_t> index(tokens, -1), position(tokens, 0);
  for (const auto& seg : route.recv[0])
    for (std::int64_t t = 0; t < seg.count; ++t)
      index[static_cast<std::size_t>(seg.dest_offset + t)] = seg.source_offset + t;
  for (std::size_t i = 0; i + 1 < l.cu_seqlens_padded.size(); ++i) {
    const std::int64_t padded = l.cu_seqlens_padded[i + 1] - l.cu_seqlens_padded[i];
    const std::int64_t base = l.cu_seqlens_padded[i] / l.cp;
    for (std::int64_t j = 0; j < padded / l.cp; ++j)
      position[static_cast<std::size_t>(base + j)] =
          dcpp::zigzag_position(padded, l.cp, l.rank_in_group, j);
  }
  nb::dict d;
  d["microbatch"] = mb;
  d["rank"] = rank;
  d["idle"] = l.idle();
  d["first_rank"] = l.first_rank;
  d["cp"] = l.cp;
  d["rank_in_group"] = l.rank_in_group;
  d["samples"] = to_numpy(l.samples);
  d["cu_seqlens"] = to_numpy(l.cu_seqlens);
  d["cu_seqlens_padded"] = to_numpy(l.cu_seqlens_padded);
  d["index"] = to_numpy(std::move(index));
  d["position_ids"] = to_numpy(std::move(position));
  return d;
}

// ---------------------------------------------------------------------------------------------
// planning

const dcpp::option_spelling python_spelling{"estimator", "gpus_per_node", "intra_node_bandwidth",
                                            "inter_node_bandwidth"};

//! A transformer cost built from a model's shape (`dcpp.cost_from_config` makes the dict): the
//! keys layers, hidden, heads, kv_heads, head_dim, ffn, vocab, gated_mlp, device and name, each
//! checked by name; the network overrides apply as to a preset.
dcpp::named_estimator model_estimator(const nb::dict& d, const dcpp::network_overrides& net) {
  const auto field = [&](const char* key) -> nb::handle {
    if (!d.contains(key))
      throw nb::value_error(fmt::format("estimator: the model dict has no '{}'", key).c_str());
    return d[key];
  };
  const auto count = [&](const char* key) {
    const nb::handle v = field(key);
    if (PyBool_Check(v.ptr()) || !PyLong_Check(v.ptr()))
      throw nb::type_error(
          fmt::format("estimator: model {} must be an integer, got {}", key, nb::repr(v).c_str())
              .c_str());
    const long long x = nb::cast<long long>(v);
    if (x < 0 || x > (1LL << 30))
      throw nb::value_error(
          fmt::format("estimator: model {} = {} must be from 0 to 2^30", key, x).c_str());
    return static_cast<std::int32_t>(x);
  };
  dcpp::model_shape shape;
  shape.name = "model";
  shape.layers = count("layers");
  shape.hidden = count("hidden");
  shape.heads = count("heads");
  shape.kv_heads = count("kv_heads");
  shape.head_dim = count("head_dim");
  shape.ffn = count("ffn");
  shape.vocab = count("vocab");
  shape.gated_mlp = nb::cast<bool>(field("gated_mlp"));
  dcpp::throw_if_failed(shape.check());
  const std::string device_name = nb::cast<std::string>(field("device"));
  const auto device =
      std::find_if(dcpp::device_presets.begin(), dcpp::device_presets.end(),
                   [&](const dcpp::device_spec& s) { return s.name == device_name; });
  if (device == dcpp::device_presets.end())
    throw nb::value_error(fmt::format("estimator: device = {}; use h100 or a100",
                                      dcpp::detail::quoted_text(device_name, '\''))
                              .c_str());
  dcpp::device_spec spec = *device;
  const std::string name = nb::cast<std::string>(field("name"));
  spec.network = dcpp::network_with(spec.network, net, name, python_spelling);
  return {dcpp::transformer_cost(shape, spec), name};
}

//! The topology `name` gives; ValueError naming the value and the names otherwise.
dcpp::topology topology_named(const std::string& name) {
  const std::optional<dcpp::topology> named = dcpp::topology_from_string(name);
  if (!named)
    throw nb::value_error(fmt::format("topology = {}; use 'aligned', 'contiguous' or 'megatron'",
                                      dcpp::detail::quoted_text(name, '\''))
                              .c_str());
  return *named;
}

struct plan_request {
  dcpp::plan_options options;
  dcpp::policy_choice policy;
  dcpp::network_overrides network;
};

template <class Estimator>
py_plan plan_with(const plan_request& rq, const Estimator& estimator, const std::string& name,
                  std::span<const std::int64_t> lengths) {
  py_plan out;
  out.options = rq.options;
  nb::gil_scoped_release release; // the planner touches no Python object
  out.plan = dcpp::with_policy(rq.policy, [&](const auto& packing) {
    return dcpp::plan_named(rq.options, estimator, name, packing, lengths);
  });
  return out;
}

//! Calls `f(estimator, name)` with the estimator `estimator` gives: a name (preset, megatron,
//! length2, calibrated:FILE), a model dict (`dcpp.cost_from_config`), a Calibration, or a
//! callable cost(length, cp), tabulated for the lengths and the legal sizes of `rq.options`.
template <class F>
auto with_estimator(const nb::object& estimator, const plan_request& rq,
                    std::span<const std::int64_t> lengths, F&& f) {
  const dcpp::plan_options& o = rq.options;
  if (nb::isinstance<nb::str>(estimator)) {
    const auto named =
        dcpp::estimator_from_spec(nb::cast<std::string>(estimator), rq.network, python_spelling);
    return std::visit([&](const auto& e) { return f(e, named.name); }, named.estimator);
  }
  const bool network =
      rq.network.gpus_per_node || rq.network.intra_node_gbytes || rq.network.inter_node_gbytes;
  if (nb::isinstance<nb::dict>(estimator)) {
    const auto named = model_estimator(nb::borrow<nb::dict>(estimator), rq.network);
    return f(std::get<dcpp::transformer_cost>(named.estimator), named.name);
  }
  if (nb::isinstance<calibration>(estimator)) {
    if (network)
      throw nb::value_error("gpus_per_node, intra_node_bandwidth and inter_node_bandwidth do not "
                            "apply to a Calibration: give gpus_per_node to Calibration.fit");
    const auto& c = nb::cast<const calibration&>(estimator);
    return f(c.fitted, c.name);
  }
  if (nb::isinstance<nb::callable>(estimator)) {
    if (network)
      throw nb::value_error("gpus_per_node, intra_node_bandwidth and inter_node_bandwidth do not "
                            "apply to a cost callable: it prices the network itself");
    const table_cost table{tabulate(nb::borrow<nb::callable>(estimator), o, lengths)};
    std::string name = "python";
    if (nb::hasattr(estimator, "__name__"))
      name = "python:" + nb::cast<std::string>(nb::str(estimator.attr("__name__")));
    return f(table, name);
  }
  throw nb::type_error(fmt::format("estimator: expected a name (str), a model (dict, from "
                                   "dcpp.cost_from_config), a Calibration or a callable "
                                   "cost(length, cp), got {}",
                                   nb::repr(estimator.type()).c_str())
                           .c_str());
}

py_plan plan_py(const lengths_array& lengths_in, std::int32_t world_size,
                std::int64_t max_tokens_per_rank, const std::string& policy,
                const nb::object& estimator, std::int32_t min_cp, std::int32_t max_cp,
                const std::string& topology, std::int32_t microbatch_multiple,
                std::int64_t padding_unit, std::int32_t extra_microbatches,
                std::optional<double> microbatch_overhead, std::int32_t static_cp,
                std::optional<std::int32_t> gpus_per_node,
                std::optional<double> intra_node_bandwidth,
                std::optional<double> inter_node_bandwidth) {
  const auto lengths = as_span(lengths_in);
  plan_request rq;
  auto& o = rq.options;
  o.world_size = world_size;
  o.max_tokens_per_rank = max_tokens_per_rank;
  o.min_cp = min_cp;
  o.max_cp = max_cp;
  o.group_topology = topology_named(topology);
  o.microbatch_multiple = microbatch_multiple;
  o.padding_unit = padding_unit;
  o.microbatch_overhead = microbatch_overhead; // checked with the others by check_problem
  if (extra_microbatches < -1)
    throw nb::value_error(
        fmt::format("extra_microbatches = {} must be >= -1 (-1: up to as many again as the "
                    "minimum)",
                    extra_microbatches)
            .c_str());
  rq.policy = {policy, static_cp, extra_microbatches};
  if (gpus_per_node && *gpus_per_node < 1)
    throw nb::value_error(fmt::format("gpus_per_node = {} must be >= 1", *gpus_per_node).c_str());
  // (the rates are checked where they apply: estimator_from_spec, in Python's spelling)
  rq.network = {gpus_per_node, intra_node_bandwidth, inter_node_bandwidth};
  dcpp::throw_if_failed(dcpp::check_problem(o, lengths));

  return with_estimator(estimator, rq, lengths, [&](const auto& e, const std::string& name) {
    return plan_with(rq, e, name, lengths);
  });
}

//! The metrics of the plan document `plan_text` (dcpp-plan/1, e.g. one of Megatron-LM's reference
//! plans) under `estimator`, judged on the options of `topology` (its lower bound; contiguous
//! by default: any group is a block of ranks, so any plan's groups are priced).
nb::dict evaluate_py(const std::string& plan_text, const nb::object& estimator,
                     const std::string& topology, std::optional<std::int32_t> gpus_per_node,
                     std::optional<double> intra_node_bandwidth,
                     std::optional<double> inter_node_bandwidth) {
  dcpp::plan p = dcpp::read_plan_json(plan_text);
  plan_request rq;
  auto& o = rq.options;
  o.world_size = p.world_size;
  o.max_tokens_per_rank = p.max_tokens_per_rank;
  o.group_topology = topology_named(topology);
  rq.network = {gpus_per_node, intra_node_bandwidth, inter_node_bandwidth};
  dcpp::throw_if_failed(dcpp::check_problem(o, p.lengths));
  // the groups index the lengths and the ranks: checked before anything reads them (the
  // budget is not: Megatron's own plans count tokens without dcpp's padding)
  std::vector<int> seen(p.lengths.size(), 0);
  for (std::size_t m = 0; m < p.microbatches.size(); ++m)
    for (const auto& g : p.microbatches[m].groups) {
      if (g.cp < 1 || g.first_rank < 0 || g.first_rank > p.world_size - g.cp)
        throw nb::value_error(fmt::format("micro-batch {}: a group of {} ranks at rank {} is "
                                          "outside the {} ranks",
                                          m, g.cp, g.first_rank, p.world_size)
                                  .c_str());
      for (const std::int32_t s : g.samples)
        if (s < 0 || std::cmp_greater_equal(s, p.lengths.size()) ||
            seen[static_cast<std::size_t>(s)]++)
          throw nb::value_error(
              fmt::format("micro-batch {}: sample {} is outside [0, {}) or appears twice", m, s,
                          p.lengths.size())
                  .c_str());
    }
  return with_estimator(estimator, rq, p.lengths, [&](const auto& e, const std::string& name) {
    dcpp::problem pr = dcpp::make_problem(o, p.lengths);
    dcpp::tabulate_costs(pr, e);
    dcpp::evaluate(p, pr, e);
    nb::dict d = metrics_dict(p);
    d["estimator"] = name;
    return d;
  });
}

//! The estimator's cost(length, cp) for every pair of `lengths` and `sizes`, row by length.
std::vector<double> costs_py(const nb::object& estimator, const std::vector<std::int64_t>& lengths,
                             const std::vector<std::int32_t>& sizes,
                             std::optional<std::int32_t> gpus_per_node,
                             std::optional<double> intra_node_bandwidth,
                             std::optional<double> inter_node_bandwidth) {
  plan_request rq;
  auto& o = rq.options;
  o.group_topology = dcpp::topology::contiguous; // every size from 1 to the largest asked
  o.world_size = 1;
  for (const std::int32_t c : sizes) {
    if (c < 1 || c > dcpp::max_world_size)
      throw nb::value_error(
          fmt::format("sizes: {} is outside [1, {}]", c, dcpp::max_world_size).c_str());
    o.world_size = std::max(o.world_size, c);
  }
  o.max_tokens_per_rank = dcpp::max_tokens_per_rank_limit;
  rq.network = {gpus_per_node, intra_node_bandwidth, inter_node_bandwidth};
  dcpp::throw_if_failed(dcpp::check_problem(o, lengths));
  return with_estimator(estimator, rq, lengths, [&](const auto& e, const std::string&) {
    std::vector<double> out;
    out.reserve(lengths.size() * sizes.size());
    for (const std::int64_t l : lengths)
      for (const std::int32_t c : sizes)
        out.push_back(static_cast<double>(e.cost(l, c)));
    return out;
  });
}

} // namespace

NB_MODULE(_dcpp, m) {
  m.doc() = "dcpp's host planner (C++), wrapped by the dcpp package";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const dcpp::error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def(
      "presets",
      [] {
        std::vector<std::string> names;
        std::stringstream all(dcpp::transformer_cost::preset_names());
        for (std::string name; std::getline(all, name, ',');)
          names.push_back(name.substr(name.find_first_not_of(' ')));
        return names;
      },
      "The transformer presets MODEL@DEVICE an estimator name may give.");

  nb::class_<calibration>(m, "Calibration",
                          "The calibrated estimator fitted to measured rows (see Calibration.fit).")
      .def_static("from_rows", &fit_rows, "rows"_a, "gpus_per_node"_a = nb::none())
      .def_static("from_csv", &fit_csv, "path"_a, "gpus_per_node"_a = nb::none())
      .def_prop_ro("name", [](const calibration& c) { return c.name; })
      .def_prop_ro("gpus_per_node", [](const calibration& c) { return c.fitted.gpus_per_node(); })
      .def_prop_ro("microbatch_overhead",
                   [](const calibration& c) { return c.fitted.microbatch_overhead(); })
      .def_prop_ro("report",
                   [](const calibration& c) {
                     const auto& r = c.fitted.report();
                     nb::dict d;
                     d["rows"] = r.rows;
                     d["coefficients"] = r.coefficients;
                     d["rms_relative"] = r.rms_relative;
                     d["max_relative"] = r.max_relative;
                     d["worst_row"] = r.worst_row;
                     d["envelope_lift"] = r.envelope_lift;
                     d["form"] = std::string(r.form);
                     return d;
                   })
      .def("cost", [](const calibration& c, std::int64_t length, std::int32_t cp) {
        return c.fitted.cost(length, cp);
      });

  nb::class_<py_plan>(m, "Plan")
      .def_prop_ro("world_size", [](const py_plan& p) { return p.plan.world_size; })
      .def_prop_ro("max_tokens_per_rank",
                   [](const py_plan& p) { return p.plan.max_tokens_per_rank; })
      .def_prop_ro("policy", [](const py_plan& p) { return p.plan.policy; })
      .def_prop_ro("estimator", [](const py_plan& p) { return p.plan.estimator; })
      .def("_lengths", [](const py_plan& p) { return to_numpy(p.plan.lengths); })
      .def_prop_ro("metrics", [](const py_plan& p) { return metrics_dict(p.plan); })
      .def_prop_ro("options",
                   [](const py_plan& p) {
                     const auto& o = p.options;
                     nb::dict d;
                     d["world_size"] = o.world_size;
                     d["max_tokens_per_rank"] = o.max_tokens_per_rank;
                     d["min_cp"] = o.min_cp;
                     d["max_cp"] = o.effective_max_cp();
                     d["topology"] = std::string(dcpp::to_string(o.group_topology));
                     d["padding_unit"] = o.padding_unit;
                     d["microbatch_multiple"] = o.microbatch_multiple;
                     d["microbatch_overhead"] = o.microbatch_overhead;
                     return d;
                   })
      .def_prop_ro("microbatch_count", [](const py_plan& p) { return p.plan.microbatches.size(); })
      .def(
          "_groups",
          [](const py_plan& p, std::size_t mb) {
            if (mb >= p.plan.microbatches.size())
              throw nb::index_error(fmt::format("microbatch {} is out of range: the plan has {}",
                                                mb, p.plan.microbatches.size())
                                        .c_str());
            const auto& m = p.plan.microbatches[mb];
            nb::list groups;
            for (const auto& g : m.groups) {
              nb::dict d;
              d["first_rank"] = g.first_rank;
              d["cp"] = g.cp;
              d["samples"] = to_numpy(g.samples);
              d["tokens"] = g.tokens;
              d["time"] = g.time;
              groups.append(d);
            }
            return nb::make_tuple(groups, m.time, m.idle_ranks);
          },
          "microbatch"_a)
      .def("to_json", [](const py_plan& p) { return dcpp::write_plan_json(p.plan, p.options); })
      .def_static(
          "from_json",
          [](const std::string& text) {
            // checked as it is read: route, rank_samples and svg index by its sample ids and
            // ranks (a sample id past the lengths read past them)
            py_plan out{dcpp::read_plan_json(text), dcpp::read_plan_options_json(text)};
            dcpp::throw_if_failed(dcpp::validate(out.plan, out.options));
            return out;
          },
          "text"_a)
      .def(
          "svg",
          [](const py_plan& p, const std::string& title) {
            return dcpp::write_plan_svg(p.plan, title);
          },
          "title"_a = "")
      .def("validate",
           [](const py_plan& p) { dcpp::throw_if_failed(dcpp::validate(p.plan, p.options)); })
      .def("route", &route_of, "microbatch"_a, "rank"_a, "padding_unit"_a = nb::none())
      .def("__eq__", [](const py_plan& a, const py_plan& b) {
        auto strip = [](dcpp::plan p) {
          p.metrics.plan_seconds = 0;
          return p;
        };
        return strip(a.plan) == strip(b.plan);
      });

  m.def("_costs", &costs_py, "estimator"_a, "lengths"_a, "sizes"_a, "gpus_per_node"_a.none(),
        "intra_node_bandwidth"_a.none(), "inter_node_bandwidth"_a.none());
  m.def("_evaluate", &evaluate_py, "plan_text"_a, "estimator"_a, "topology"_a,
        "gpus_per_node"_a.none(), "intra_node_bandwidth"_a.none(), "inter_node_bandwidth"_a.none());
  m.def("_plan", &plan_py, "lengths"_a, "world_size"_a, "max_tokens_per_rank"_a, "policy"_a,
        "estimator"_a, "min_cp"_a, "max_cp"_a, "topology"_a, "microbatch_multiple"_a,
        "padding_unit"_a, "extra_microbatches"_a, "microbatch_overhead"_a.none(), "static_cp"_a,
        "gpus_per_node"_a.none(), "intra_node_bandwidth"_a.none(), "inter_node_bandwidth"_a.none());
}
