#pragma once
// The metrics file: one JSON object per line, one line per optimizer step (see docs/TRAINING.md
// for the fields). Lines are flushed as they are written, so a killed run keeps its history.
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace sbp {

class MetricsLog {
 public:
  // Opens `path` for appending. `resume_step` >= 0: a resumed run — lines of steps after it
  // (written by the interrupted run past its last checkpoint) are dropped first, so every step
  // appears once. < 0: a fresh run, the file is started anew.
  MetricsLog(const std::string& path, int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::ordered_json& line);  // keys in the order given
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace sbp
