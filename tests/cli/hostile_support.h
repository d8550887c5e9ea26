#pragma once
// What every hostile-input program shares (issue 17, tests/cli/hostile_input_test.cpp): a case
// (the command line, the substrings its one error line must hold, the paths it must not create)
// and expect_clean_error, which runs the real `streambp` on it and checks the suite's promises:
// exactly one line `streambp: error: ...` naming the file and the key/field/line at fault, exit
// code 1, no "internal error", within 30 s and (outside AddressSanitizer) 4 GB of address space,
// and no output created. Plus byte helpers for building hostile files.
// New classes of hostile input go in programs of their own (tests/cli/hostile_*_test.cpp), so
// that ctest runs them beside the others.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace sbp::hostile {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_command;

inline constexpr bool kAsan = test::kAddressSanitizer;

inline std::string bin() { return test::streambp_binary(); }
inline std::string src() { return test::source_dir(); }

struct Case {
  std::string name;  // what is hostile, for the trace
  std::string args;  // the command line after `streambp`
  // Substrings of the error line: the file, and the key/field/line at fault.
  std::vector<std::string> says;
  // Paths the command would write to: each must still be absent afterwards.
  std::vector<std::string> not_created = {};
  // Only stderr must be the one error line: a resume summarises the data it loaded (stdout)
  // before it cross-checks the optimizer state and data hashes against it.
  bool stderr_only = false;
};

// The memory cap: 4 GB of address space, except under AddressSanitizer (which reserves terabytes
// of shadow) and in the suite's STREAMBP_CHECK_MEMORY=1 pass (whose checking backend reserves a
// 64 GiB arena up front, which the cap would refuse before any input is read).
inline std::string memory_cap() {
  const char* checked = std::getenv("STREAMBP_CHECK_MEMORY");
  if (kAsan || (checked && std::string(checked) == "1")) return "";
  return "ulimit -v 4000000; ";
}

inline size_t count_lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

// Runs one case from `cwd` and checks the six promises of the suite.
inline void expect_clean_error(const Case& c, const std::string& cwd) {
  SCOPED_TRACE(c.name + ": streambp " + c.args);
  // Two threads: OpenBLAS and OpenMP reserve address space per thread, which on a many-core CI
  // machine would eat the 4 GB cap before any input is read.
  const std::string cmd =
      memory_cap() + "OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 timeout 30 " + bin() + " " + c.args;
  const auto r = run_command("cd " + cwd + " && " +
                             (c.stderr_only ? "{ " + cmd + " 2>&1 >/dev/null; }" : cmd));
  if (std::getenv("HOSTILE_VERBOSE")) std::printf("%-40s %s", c.name.c_str(), r.output.c_str());
  EXPECT_NE(r.exit_code, 124) << "hang (30 s)\n" << r.output;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count_lines(r.output), 1u) << r.output;
  EXPECT_EQ(r.output.rfind("streambp: error: ", 0), 0u) << r.output;
  for (const std::string& s : c.says)
    EXPECT_NE(r.output.find(s), std::string::npos) << "wanted: " << s << "\n" << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  for (const std::string& p : c.not_created) EXPECT_FALSE(fs::exists(p)) << p << " was created";
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The 8-byte little-endian header length, the header, the data: a safetensors file.
inline std::string safetensors_bytes(uint64_t header_len, const std::string& header,
                              const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header_len >> (8 * i)) & 0xff));
  return out + header + data;
}
inline std::string safetensors_bytes(const json& header, const std::string& data) {
  const std::string h = header.dump();
  return safetensors_bytes(h.size(), h, data);
}

// A safetensors file split into its header and data section.
struct Safetensors {
  json header;
  std::string data;
  explicit Safetensors(const std::string& path) {
    const std::string b = read_bytes(path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
      n = (n << 8) | static_cast<unsigned char>(b[static_cast<size_t>(i)]);
    header = json::parse(b.substr(8, n));
    data = b.substr(8 + n);
  }
  std::string bytes() const { return safetensors_bytes(header, data); }
  // The same tensors without `name`, laid out again without a hole.
  Safetensors without(const std::string& name) const {
    Safetensors s = *this;
    s.header = json::object();
    s.data.clear();
    for (const auto& [k, v] : header.items()) {
      if (k == name) continue;
      if (k == "__metadata__") {
        s.header[k] = v;
        continue;
      }
      const auto b = v["data_offsets"][0].get<size_t>(), e = v["data_offsets"][1].get<size_t>();
      json t = v;
      t["data_offsets"] = {s.data.size(), s.data.size() + (e - b)};
      s.data += data.substr(b, e - b);
      s.header[k] = t;
    }
    return s;
  }
};

}  // namespace sbp::hostile
