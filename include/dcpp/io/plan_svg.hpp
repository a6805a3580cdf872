// An SVG picture of a plan: ranks down, micro-batches across, one box per group.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "dcpp/core/math.hpp"
#include "dcpp/planner/evaluate.hpp"
#include "dcpp/planner/plan.hpp"

namespace dcpp {

namespace detail {
//! `text` as XML character data: `& < > "` as entities, and what XML 1.0 cannot hold (a control
//! byte other than tab and newline, a byte that is no part of a UTF-8 character) as U+FFFD. A
//! title is a file name (`R&D<1>.txt` made the picture malformed XML) and may be any bytes.
inline std::string xml_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  constexpr std::string_view replacement = "\xEF\xBF\xBD";
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      switch (byte) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += byte < 0x20 && byte != '\t' && byte != '\n' ? replacement : text.substr(i, 1);
      }
      ++i;
      continue;
    }
    // a UTF-8 sequence: its lead byte's length, continuation bytes, the shortest form, at most
    // U+10FFFF, no surrogates, no U+FFFE or U+FFFF
    const std::size_t length = byte >= 0xC2 && byte <= 0xDF   ? 2
                               : byte >= 0xE0 && byte <= 0xEF ? 3
                               : byte >= 0xF0 && byte <= 0xF4 ? 4
                                                              : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; valid && k < length; ++k)
      valid = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (valid && length > 2) {
      const auto second = static_cast<unsigned char>(text[i + 1]);
      valid = !(byte == 0xE0 && second < 0xA0) && !(byte == 0xED && second >= 0xA0) &&
              !(byte == 0xF0 && second < 0x90) && !(byte == 0xF4 && second >= 0x90);
      // U+FFFE and U+FFFF are no characters of XML (its Char production stops at U+FFFD)
      if (valid && length == 3 && byte == 0xEF && second == 0xBF &&
          static_cast<unsigned char>(text[i + 2]) >= 0xBE)
        valid = false;
    }
    if (valid) {
      out += text.substr(i, length);
      i += length;
    } else {
      out += replacement;
      ++i;
    }
  }
  return out;
}
} // namespace detail

//! Draws the plan: each micro-batch is a column as wide as its time (the max over ranks), each
//! group a box over its ranks as wide as its time, coloured by CP size; the hatched area in a
//! column is idle time (ranks waiting for the slowest group, or in no group). A title carries the
//! metrics; hovering a box shows its samples, tokens and time.
inline std::string write_plan_svg(const plan& p, std::string_view title = "") {
  static constexpr std::array<const char*, 11> palette{"#4e79a7", "#59a14f", "#f28e2b", "#e15759",
                                                       "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
                                                       "#9c755f", "#bab0ac", "#1b9e77"};
  const double step = std::max(p.metrics.estimated_step_time, 1e-300);
  const double plot_width = 1100.0;
  const double left = 60.0;
  const double top = 70.0;
  const double gap = 2.0;
  const std::int32_t ranks = std::max(1, p.world_size);
  // a row per rank: up to 18 px, at least 1 px while the plot stays within 16,384 px (a world of
  // 2^24 ranks drew a plot 2^24 px tall with a million rank labels: 88 MB for 2 samples)
  const double row = std::clamp(640.0 / ranks, std::min(1.0, 16384.0 / ranks), 18.0);
  const double plot_height = row * ranks;
  const double usable = plot_width - gap * static_cast<double>(p.microbatches.size());
  const double scale = usable / step;
  const double width = left + plot_width + 170.0;
  const double height = top + plot_height + 50.0;

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<defs><pattern id=\"idle\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f4f4f4\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#c8c8c8\" "
      "stroke-width=\"2\"/></pattern></defs>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height, width, height);
  svg += fmt::format("<text x=\"{}\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
                     left, title.empty() ? std::string("dcpp plan") : detail::xml_text(title));
  svg += fmt::format(
      "<text x=\"{}\" y=\"38\">policy {} | estimator {} | {} samples, {} ranks, {} micro-batches | "
      "step time {:.5g} | lower bound {:.5g} | efficiency {:.3f} | idle rank slots {}</text>\n",
      left, detail::xml_text(p.policy), detail::xml_text(p.estimator), p.lengths.size(),
      p.world_size, p.microbatches.size(), p.metrics.estimated_step_time, p.metrics.lower_bound,
      p.metrics.efficiency, p.metrics.idle_rank_slots);
  svg += fmt::format(
      "<text x=\"{}\" y=\"56\" fill=\"#555\">micro-batches left to right, each as wide as "
      "its time; ranks top to bottom; hatched: idle</text>\n",
      left);
  double x = left;
  for (std::size_t i = 0; i < p.microbatches.size(); ++i) {
    const auto& mb = p.microbatches[i];
    const double w = mb.time * scale;
    svg += fmt::format("<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" "
                       "fill=\"url(#idle)\"/>\n",
                       x, top, std::max(w, 0.5), plot_height);
    for (const auto& g : mb.groups) {
      const int shade =
          std::min<int>(log2_floor(std::max(1, g.cp)), static_cast<int>(palette.size()) - 1);
      std::string samples;
      for (std::size_t k = 0; k < g.samples.size() && k < 12; ++k)
        samples += fmt::format("{}{}", k ? " " : "", g.samples[k]);
      if (g.samples.size() > 12)
        samples += fmt::format(" ... ({} samples)", g.samples.size());
      svg += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\" "
          "stroke=\"white\" stroke-width=\"{}\"><title>micro-batch {} ranks {}-{} cp {}: samples "
          "{}; {} tokens/rank; time {:.5g}</title></rect>\n",
          x, top + g.first_rank * row, std::max(g.time * scale, 0.5), g.cp * row,
          palette[static_cast<std::size_t>(shade)], row >= 4 ? 0.6 : 0.0, i, g.first_rank,
          g.first_rank + g.cp - 1, g.cp, samples, g.tokens, g.time);
    }
    if (w > 14)
      svg += fmt::format(
          "<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\" fill=\"#333\">{}</text>\n",
          x + w / 2, top - 4, i);
    x += w + gap;
  }
  // rank labels
  const std::int32_t every =
      std::max<std::int32_t>(1, static_cast<std::int32_t>(std::ceil(14.0 / row)));
  for (std::int32_t r = 0; r < ranks; r += every)
    svg += fmt::format("<text x=\"{}\" y=\"{:.2f}\" text-anchor=\"end\" fill=\"#333\">{}</text>\n",
                       left - 6, top + (r + 0.5) * row + 4, r);
  svg += fmt::format("<text x=\"{}\" y=\"{:.2f}\" fill=\"#333\">rank</text>\n", 8, top - 4);
  svg +=
      fmt::format("<text x=\"{}\" y=\"{:.2f}\" fill=\"#333\">time &#8594; (total {:.5g})</text>\n",
                  left, top + plot_height + 20, p.metrics.estimated_step_time);
  // legend: the CP sizes present
  std::int32_t present = 0;
  bool ranges = false; // contiguous topology: sizes that are not powers of two share a colour
  for (const auto& mb : p.microbatches)
    for (const auto& g : mb.groups) {
      present |= 1 << std::min<int>(log2_floor(std::max(1, g.cp)), 30);
      ranges = ranges || !is_power_of_two(g.cp);
    }
  double ly = top;
  svg += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" font-weight=\"bold\">CP size</text>\n",
                     left + plot_width + 20, ly);
  for (std::size_t k = 0; k < palette.size(); ++k) {
    if ((present & (1 << k)) == 0)
      continue;
    ly += 18;
    svg += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"14\" height=\"12\" fill=\"{}\"/>"
                       "<text x=\"{:.0f}\" y=\"{:.0f}\">{}</text>\n",
                       left + plot_width + 20, ly - 10, palette[k], left + plot_width + 40, ly,
                       k + 1 == palette.size() ? fmt::format("{}+", 1 << k)
                       : ranges && k > 0       ? fmt::format("{}-{}", 1 << k, (2 << k) - 1)
                                               : fmt::format("{}", 1 << k));
  }
  ly += 18;
  svg += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"14\" height=\"12\" "
                     "fill=\"url(#idle)\" stroke=\"#bbb\"/>"
                     "<text x=\"{:.0f}\" y=\"{:.0f}\">idle</text>\n",
                     left + plot_width + 20, ly - 10, left + plot_width + 40, ly);
  svg += "</svg>\n";
  return svg;
}

} // namespace dcpp
