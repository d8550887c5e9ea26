// libFuzzer harness: the lines a `command` reward program writes back (reward/reward_protocol.h),
// one answer per line. Each line must give a finite reward or a reason; the reason must be one
// line (it goes into the trainer's one-line error) and nothing may throw.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fuzz/fuzz_support.h"
#include "reward/reward_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  sbp::fuzz::expect_clean([&] {
    while (!all.empty()) {
      const size_t nl = all.find('\n');
      const std::string line(all.substr(0, nl));
      all = nl == std::string_view::npos ? std::string_view() : all.substr(nl + 1);
      const sbp::RewardAnswer a = sbp::parse_reward_answer(line);
      const bool ok =
          a.error.empty() ? std::isfinite(a.reward) : a.error.find('\n') == std::string::npos;
      if (!ok) {
        std::fprintf(stderr, "fuzz: a non-finite reward accepted, or a reason of many lines\n");
        std::abort();
      }
    }
  });
  return 0;
}
