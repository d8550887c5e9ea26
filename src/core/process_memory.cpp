#include "core/process_memory.h"

#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace sbp {

namespace {
int64_t read_status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t klen = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.starts_with(key)) return std::stoll(line.substr(klen + 1)) * 1024;
  }
  return 0;
}
}  // namespace

int64_t peak_rss_bytes() { return read_status_kb("VmHWM"); }
int64_t current_rss_bytes() { return read_status_kb("VmRSS"); }

bool reset_peak_rss() {
  malloc_trim(0);
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace sbp
