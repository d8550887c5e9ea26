#pragma once
// The process's resident memory, as the kernel counts it (Linux /proc).
#include <cstdint>

namespace sbp {

// Peak resident set size (VmHWM) in bytes; 0 if unavailable.
int64_t peak_rss_bytes();
// Current resident set size (VmRSS) in bytes; 0 if unavailable.
int64_t current_rss_bytes();
// Returns freed heap memory to the system and restarts the peak-RSS counter from the
// current RSS (writes 5 to /proc/self/clear_refs). Returns false if the kernel refused.
bool reset_peak_rss();

}  // namespace sbp
