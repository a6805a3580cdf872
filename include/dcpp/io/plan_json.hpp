// The dcpp-plan/1 JSON format (DESIGN.md section 5): write a plan, read one back.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dcpp/error.hpp"
#include "dcpp/io/json_input.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/options.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

inline constexpr std::string_view plan_format_name = "dcpp-plan/1";

namespace detail {
inline nlohmann::json options_to_json(const plan_options& o) {
  return {{"world_size", o.world_size},
          {"max_tokens_per_rank", o.max_tokens_per_rank},
          {"min_cp", o.min_cp},
          {"max_cp", o.effective_max_cp()},
          {"topology", to_string(o.group_topology)},
          {"padding_unit", o.padding_unit},
          {"microbatch_multiple", o.microbatch_multiple},
          {"microbatch_overhead", o.microbatch_overhead ? nlohmann::json(*o.microbatch_overhead)
                                                        : nlohmann::json(nullptr)}};
}
inline nlohmann::json network_to_json(const std::optional<network_spec>& n) {
  if (!n)
    return nullptr;
  const auto tier = [](const link_tier& t) -> nlohmann::json {
    if (!(t.bytes_per_second > 0))
      return nullptr; // not stated (a calibration fits its rings' terms instead)
    return {{"bytes_per_second", t.bytes_per_second}, {"latency", t.latency}};
  };
  return {{"gpus_per_node", n->gpus_per_node},
          {"intra_node", tier(n->intra_node)},
          {"inter_node", tier(n->inter_node)}};
}
} // namespace detail

//! The plan as a JSON value: the DESIGN.md keys, plus per group `tokens` and `time` (per rank),
//! per micro-batch `time` and `idle_ranks`, the metrics, the policy, the estimator and the
//! options it was made under.
inline nlohmann::json to_json(const plan& p, const plan_options& o) {
  nlohmann::json microbatches = nlohmann::json::array();
  for (const auto& mb : p.microbatches) {
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : mb.groups)
      groups.push_back({{"first_rank", g.first_rank},
                        {"cp", g.cp},
                        {"samples", g.samples},
                        {"tokens", g.tokens},
                        {"time", g.time}});
    microbatches.push_back(
        {{"groups", std::move(groups)}, {"time", mb.time}, {"idle_ranks", mb.idle_ranks}});
  }
  const auto& m = p.metrics;
  return {{"format", plan_format_name},
          {"world_size", p.world_size},
          {"max_tokens_per_rank", p.max_tokens_per_rank},
          {"policy", p.policy},
          {"estimator", p.estimator},
          {"network", detail::network_to_json(p.network)},
          {"options", detail::options_to_json(o)},
          {"lengths", p.lengths},
          {"microbatches", std::move(microbatches)},
          {"metrics",
           {{"estimated_step_time", m.estimated_step_time},
            {"lower_bound", m.lower_bound},
            {"efficiency", m.efficiency},
            {"plan_seconds", m.plan_seconds},
            {"microbatches", p.microbatches.size()},
            {"min_microbatches", m.min_microbatches},
            {"microbatch_overhead", m.microbatch_overhead},
            {"max_rank_load", m.max_rank_load},
            {"mean_rank_load", m.mean_rank_load},
            {"idle_rank_slots", m.idle_rank_slots}}}};
}

//! Serialises with one line per top-level key and per micro-batch, so that a plan diffs well.
//! A name that is not UTF-8 (an estimator `calibrated:FILE` whose file name is Latin-1) is
//! written with U+FFFD for its stray bytes (nlohmann's dump threw: an "internal error").
inline std::string write_plan_json(const plan& p, const plan_options& o) {
  const nlohmann::json j = to_json(p, o);
  const auto text = [](const nlohmann::json& v) {
    return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::ostringstream out;
  out << "{\n";
  bool first_key = true;
  for (const char* key : {"format", "world_size", "max_tokens_per_rank", "policy", "estimator",
                          "network", "options", "lengths", "microbatches", "metrics"}) {
    out << (first_key ? "" : ",\n") << "  \"" << key << "\": ";
    first_key = false;
    if (std::string_view(key) == "microbatches") {
      out << "[";
      const auto& mbs = j.at(key);
      for (std::size_t i = 0; i < mbs.size(); ++i)
        out << (i ? ",\n    " : "\n    ") << text(mbs[i]);
      out << (mbs.empty() ? "]" : "\n  ]");
    } else {
      out << text(j.at(key));
    }
  }
  out << "\n}\n";
  return out.str();
}

namespace detail {
template <class T>
T get_field(const nlohmann::json& j, std::string_view where, const char* key) {
  if (!j.is_object() || !j.contains(key))
    throw error(status_code::parse_error, fmt::format("{}: missing field '{}'", where, key));
  const auto& v = j.at(key);
  const auto wrong = [&](std::string_view expected) {
    return error(status_code::parse_error, fmt::format("{}: field '{}' = {} must be {}", where, key,
                                                       describe_json(v), expected));
  };
  if constexpr (std::is_integral_v<T>) {
    T out{};
    if (!json_integer(v, out))
      throw wrong(fmt::format("an integer in [{}, {}]", std::numeric_limits<T>::min(),
                              std::numeric_limits<T>::max()));
    return out;
  } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>> ||
                       std::is_same_v<T, std::vector<std::int32_t>>) {
    using E = typename T::value_type;
    if (!v.is_array())
      throw wrong("an array of integers");
    T out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!json_integer(v[i], out[i]))
        throw error(status_code::parse_error,
                    fmt::format("{}: {}[{}] = {} must be an integer in [{}, {}]", where, key, i,
                                describe_json(v[i]), std::numeric_limits<E>::min(),
                                std::numeric_limits<E>::max()));
    return out;
  } else if constexpr (std::is_same_v<T, double>) {
    if (!v.is_number())
      throw wrong("a number");
    return v.get<double>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string())
      throw wrong("a string");
    return v.get<std::string>();
  } else {
    return v;
  }
}
} // namespace detail

//! Reads a dcpp-plan/1 document. Per-group and per-micro-batch times, if present, are kept;
//! call `evaluate` to recompute them under an estimator and `validate` to check the plan.
//! Throws dcpp::error naming the field on malformed input.
inline plan read_plan_json(std::string_view text, std::string_view source = "plan") {
  const nlohmann::json j = detail::parse_json(text, source);
  const auto format = detail::get_field<std::string>(j, source, "format");
  if (format != plan_format_name)
    throw error(status_code::parse_error,
                fmt::format("{}: format = {}, expected '{}'", source,
                            detail::quoted_text(format, '\''), plan_format_name));
  plan p;
  p.world_size = detail::get_field<std::int32_t>(j, source, "world_size");
  p.max_tokens_per_rank = detail::get_field<std::int64_t>(j, source, "max_tokens_per_rank");
  p.lengths = detail::get_field<std::vector<std::int64_t>>(j, source, "lengths");
  if (j.contains("policy") && j["policy"].is_string())
    p.policy = j["policy"].get<std::string>();
  if (j.contains("estimator") && j["estimator"].is_string())
    p.estimator = j["estimator"].get<std::string>();
  if (j.contains("network") && j["network"].is_object()) {
    const std::string where = fmt::format("{}: network", source);
    const auto& n = j["network"];
    network_spec net;
    net.gpus_per_node = detail::get_field<std::int32_t>(n, where, "gpus_per_node");
    for (const auto& [key, tier] :
         {std::pair<const char*, link_tier*>{"intra_node", &net.intra_node},
          {"inter_node", &net.inter_node}}) {
      if (n.contains(key) && n[key].is_object()) {
        const std::string tw = fmt::format("{}.{}", where, key);
        tier->bytes_per_second = detail::get_field<double>(n[key], tw, "bytes_per_second");
        tier->latency = detail::get_field<double>(n[key], tw, "latency");
      } else {
        *tier = {};
      }
    }
    p.network = net;
  }
  const auto mbs = detail::get_field<nlohmann::json>(j, source, "microbatches");
  if (!mbs.is_array())
    throw error(status_code::parse_error,
                fmt::format("{}: 'microbatches' must be an array", source));
  // a recorded time is a finite number >= 0, a token count or idle count one a group or a
  // micro-batch can have: anything else is a damaged or hand-edited document, named here rather
  // than carried into a report (a world or budget that is itself wrong is `validate`'s to name)
  const auto time_of = [](const nlohmann::json& obj, const std::string& where, const char* key) {
    const auto v = detail::get_field<double>(obj, where, key);
    if (!(v >= 0 && v <= std::numeric_limits<double>::max()))
      throw error(status_code::parse_error,
                  fmt::format("{}: '{}' = {} must be a finite number >= 0", where, key, v));
    return v;
  };
  const auto count_of = [](const nlohmann::json& obj, const std::string& where, const char* key,
                           std::int64_t limit, const char* limit_name) {
    const auto v = detail::get_field<std::int64_t>(obj, where, key);
    if (v < 0 || v > limit)
      throw error(status_code::parse_error, fmt::format("{}: '{}' = {} must be from 0 to {} ({})",
                                                        where, key, v, limit, limit_name));
    return v;
  };
  for (std::size_t m = 0; m < mbs.size(); ++m) {
    const std::string where = fmt::format("{}: microbatches[{}]", source, m);
    plan_microbatch mb;
    const auto groups = detail::get_field<nlohmann::json>(mbs[m], where, "groups");
    if (!groups.is_array())
      throw error(status_code::parse_error, fmt::format("{}: 'groups' must be an array", where));
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const std::string gw = fmt::format("{}.groups[{}]", where, g);
      plan_group grp;
      grp.first_rank = detail::get_field<std::int32_t>(groups[g], gw, "first_rank");
      grp.cp = detail::get_field<std::int32_t>(groups[g], gw, "cp");
      grp.samples = detail::get_field<std::vector<std::int32_t>>(groups[g], gw, "samples");
      if (groups[g].contains("tokens"))
        grp.tokens = count_of(groups[g], gw, "tokens",
                              p.max_tokens_per_rank >= 1 ? p.max_tokens_per_rank
                                                         : std::numeric_limits<std::int64_t>::max(),
                              "max_tokens_per_rank");
      if (groups[g].contains("time"))
        grp.time = time_of(groups[g], gw, "time");
      mb.groups.push_back(std::move(grp));
    }
    if (mbs[m].contains("time"))
      mb.time = time_of(mbs[m], where, "time");
    if (mbs[m].contains("idle_ranks"))
      mb.idle_ranks = static_cast<std::int32_t>(
          count_of(mbs[m], where, "idle_ranks",
                   p.world_size >= 1 ? p.world_size : std::numeric_limits<std::int32_t>::max(),
                   "world_size"));
    p.microbatches.push_back(std::move(mb));
  }
  if (j.contains("metrics") && j["metrics"].is_object()) {
    const auto& m = j["metrics"];
    const std::string at = fmt::format("{}: metrics", source);
    auto number = [&](const char* key, double fallback) { // null: not recorded (NaN)
      return m.contains(key) && !m[key].is_null() ? time_of(m, at, key) : fallback;
    };
    p.metrics.estimated_step_time = number("estimated_step_time", 0);
    p.metrics.lower_bound = number("lower_bound", 0);
    p.metrics.efficiency = number("efficiency", 0);
    p.metrics.plan_seconds = number("plan_seconds", 0);
    p.metrics.max_rank_load = number("max_rank_load", 0);
    p.metrics.mean_rank_load = number("mean_rank_load", 0);
    // the counts are integers in range or an error naming the field (a cast of 1e21 to int is
    // undefined behaviour)
    const std::string where = fmt::format("{}: metrics", source);
    if (m.contains("idle_rank_slots"))
      p.metrics.idle_rank_slots = detail::get_field<std::int64_t>(m, where, "idle_rank_slots");
    if (m.contains("min_microbatches"))
      p.metrics.min_microbatches = detail::get_field<std::int32_t>(m, where, "min_microbatches");
    p.metrics.microbatch_overhead = number("microbatch_overhead", 0);
  }
  return p;
}

//! The options a dcpp-plan/1 document records (its "options" object); without one, the options
//! the plan's own fields give (world size, budget) with the defaults for the rest. Throws
//! dcpp::error naming the field on malformed input.
inline plan_options read_plan_options_json(std::string_view text,
                                           std::string_view source = "plan") {
  const nlohmann::json j = detail::parse_json(text, source);
  plan_options o;
  o.world_size = detail::get_field<std::int32_t>(j, source, "world_size");
  o.max_tokens_per_rank = detail::get_field<std::int64_t>(j, source, "max_tokens_per_rank");
  if (!j.contains("options") || j["options"].is_null())
    return o;
  const std::string where = fmt::format("{}: options", source);
  const auto& opt = j["options"];
  o.world_size = detail::get_field<std::int32_t>(opt, where, "world_size");
  o.max_tokens_per_rank = detail::get_field<std::int64_t>(opt, where, "max_tokens_per_rank");
  o.min_cp = detail::get_field<std::int32_t>(opt, where, "min_cp");
  o.max_cp = detail::get_field<std::int32_t>(opt, where, "max_cp");
  const auto topology = detail::get_field<std::string>(opt, where, "topology");
  const std::optional<dcpp::topology> named = topology_from_string(topology);
  if (!named)
    throw error(status_code::parse_error,
                fmt::format("{}: topology = {}, expected {}", where,
                            detail::quoted_text(topology, '\''), topology_names));
  o.group_topology = *named;
  o.padding_unit = detail::get_field<std::int64_t>(opt, where, "padding_unit");
  o.microbatch_multiple = detail::get_field<std::int32_t>(opt, where, "microbatch_multiple");
  if (opt.contains("microbatch_overhead") && !opt["microbatch_overhead"].is_null())
    o.microbatch_overhead = detail::get_field<double>(opt, where, "microbatch_overhead");
  return o;
}

} // namespace dcpp
