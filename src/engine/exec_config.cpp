#include "engine/exec_config.h"

#include <algorithm>
#include <vector>
#include <sstream>

#include "core/error.h"

namespace sbp {

int64_t ExecConfig::layer_chunk_for(int64_t T) const {
  if (layers != LayerMode::stream) return T;
  return std::max<int64_t>(1, std::min(layer_chunk > 0 ? layer_chunk : T, T));
}

int64_t ExecConfig::head_chunk_for(int64_t T) const {
  if (head == HeadMode::full) return T;
  return std::max<int64_t>(1, std::min(head_chunk > 0 ? head_chunk : T, T));
}

ExecConfig parse_mode(const std::string& s) {
  ExecConfig e;
  if (s == "base") {
    e.layers = LayerMode::store;
    e.head = HeadMode::full;
    return e;
  }
  if (s == "checkpoint") {
    e.layers = LayerMode::recompute;
    e.head = HeadMode::full;
    return e;
  }
  if (s == "stream") return e;
  const size_t plus = s.find('+');
  const std::string l = s.substr(0, plus);
  const std::string h = plus == std::string::npos ? "" : s.substr(plus + 1);
  if (l == "store")
    e.layers = LayerMode::store;
  else if (l == "recompute")
    e.layers = LayerMode::recompute;
  else if (l == "stream")
    e.layers = LayerMode::stream;
  const bool layers_ok = l == "store" || l == "recompute" || l == "stream";
  const bool head_ok = h == "full" || h == "chunked";
  if (!layers_ok || !head_ok) {
    throw InputError(
        "unknown mode '" + s +
        "' (use base, checkpoint, stream, or <store|recompute|stream>+<full|chunked>)");
  }
  e.head = h == "full" ? HeadMode::full : HeadMode::chunked;
  return e;
}

std::vector<ExecConfig> parse_modes(const std::string& list) {
  std::vector<ExecConfig> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(parse_mode(item));
  }
  if (out.empty()) throw InputError("no modes given");
  return out;
}

std::string mode_name(const ExecConfig& e) {
  if (e.layers == LayerMode::store && e.head == HeadMode::full) return "base";
  if (e.layers == LayerMode::recompute && e.head == HeadMode::full) return "checkpoint";
  if (e.layers == LayerMode::stream && e.head == HeadMode::chunked) return "stream";
  const char* l = e.layers == LayerMode::store       ? "store"
                  : e.layers == LayerMode::recompute ? "recompute"
                                                     : "stream";
  return std::string(l) + (e.head == HeadMode::full ? "+full" : "+chunked");
}

Offload parse_offload(const std::string& list) {
  Offload o;
  if (list == "none") return o;
  std::string joined = list;
  std::replace(joined.begin(), joined.end(), '+', ',');
  // Items between separators; an empty one (a separator at either end, or two together) is an
  // error, as a misspelt item is.
  std::vector<std::string> items(1);
  for (char ch : joined) {
    if (ch == ',')
      items.emplace_back();
    else
      items.back() += ch;
  }
  for (const std::string& item : items) {
    if (item.empty())
      throw InputError("--offload: an empty item in '" + list +
                       "' (use none, or checkpoints, residual_grad and optimizer joined by +)");
    if (item == "none")  // alone it returned above
      throw InputError("--offload: 'none' cannot be combined with other items in '" + list +
                       "' (use none alone, or checkpoints, residual_grad and optimizer joined by +)");
    if (item == "checkpoints")
      o.checkpoints = true;
    else if (item == "residual_grad")
      o.residual_grad = true;
    else if (item == "optimizer")
      o.optimizer = true;
    else
      throw InputError("--offload: unknown item '" + item +
                       "' (use none, or checkpoints, residual_grad and optimizer joined by +)");
  }
  if (!o.any())
    throw InputError("--offload: empty list (use none, or checkpoints, residual_grad and "
                     "optimizer joined by +)");
  return o;
}

std::string offload_name(const Offload& o) {
  std::string name;
  for (const auto& [on, item] : {std::pair{o.checkpoints, "checkpoints"},
                                 std::pair{o.residual_grad, "residual_grad"},
                                 std::pair{o.optimizer, "optimizer"}})
    if (on) name += (name.empty() ? "" : "+") + std::string(item);
  return name.empty() ? "none" : name;
}

}  // namespace sbp
