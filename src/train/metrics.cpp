#include "train/metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/untrusted_json.h"
#include "core/output_file.h"

namespace sbp {

MetricsLog::MetricsLog(const std::string& path, int64_t resume_step) : path_(path) {
  namespace fs = std::filesystem;
  // The output rule (core/output_file.h) decides what may be written: not a directory or a
  // dangling link. The trainer has checked the path inside output_dir (output_target_in).
  output_target(path);
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (resume_step >= 0 && fs::exists(p)) {
    // Keep the lines up to the checkpoint's step (a torn last line of a killed run goes too).
    std::ifstream in(path);
    std::ostringstream kept;
    std::string line;
    while (std::getline(in, line)) {
      const auto j = parse_untrusted_json_or_discarded(line);
      if (j.is_discarded() || !j.is_object() || !j.contains("step") ||
          !j["step"].is_number_integer())
        continue;
      if (j["step"].get<int64_t>() <= resume_step) kept << line << '\n';
    }
    in.close();
    write_file_atomically(path, kept.str());
  }
  f_ = std::fopen(path.c_str(), resume_step >= 0 ? "a" : "w");
  if (!f_) throw InputError(path + ": cannot open metrics file for writing");
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::ordered_json& line) {
  const std::string s =
      line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  // A full disk shows at the flush: the run stops rather than lose its history silently.
  if (std::fwrite(s.data(), 1, s.size(), f_) != s.size() || std::fflush(f_) != 0)
    throw InputError(path_ + ": cannot write metrics: " + std::strerror(errno));
}

}  // namespace sbp
