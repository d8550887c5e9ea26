#pragma once
// A `streambp train` run directory for end-to-end tests: a tiny model (kTinyChatModelJson) and
// a config.yaml that trains it on the tiny-chat example data.
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.h"

namespace sbp::test {

inline std::string bin() { return streambp_binary(); }
inline std::string src() { return source_dir(); }

inline const char* const kTinyModel = kTinyChatModelJson;

// A run directory: the model config, a config.yaml training it on the tiny-chat data.
struct TrainRun {
  TempDir dir;
  std::string config;
  // `extra_yaml` is added at the top level, `data_yaml` under data:. A top-level key of
  // `extra_yaml` replaces the default below (a key given twice is an error).
  explicit TrainRun(const std::string& extra_yaml = "", const std::string& data_yaml = "") {
    write_text(dir.file("model.json"), kTinyModel);
    config = dir.file("config.yaml");
    std::string defaults;
    for (const auto& [key, value] :
         {std::pair<std::string, std::string>{"threads", "1"},
          {"layer_chunk", "64"},
          {"head_chunk", "32"},
          {"max_tokens", "256"}}) {
      const std::string line = key + ": ";
      if (extra_yaml.rfind(line, 0) != 0 && extra_yaml.find("\n" + line) == std::string::npos)
        defaults += line + value + "\n";
    }
    write_text(config, "model: " + dir.file("model.json") + "\ntokenizer: " + src() +
                           "/examples/tiny-chat\noutput_dir: " + dir.file("out") + "\n" +
                           defaults + extra_yaml + "data:\n  train: " + src() +
                           "/examples/tiny-chat/train.jsonl\n" + data_yaml);
  }
  std::string out(const std::string& rel = "") const {
    return dir.file("out") + (rel.empty() ? "" : "/" + rel);
  }
  CommandResult train(const std::string& args = "") const {
    return run_command(bin() + " train " + config + " " + args);
  }
};

inline std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_text(path));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace sbp::test
