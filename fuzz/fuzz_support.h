#pragma once
// Shared by the libFuzzer harnesses (fuzz/README.md).
//
// The rule every harness enforces: hostile input may only end in sbp::Error (an InputError
// naming the file and field, an OutOfMemoryError). Any other exception is what the CLI reports
// as "internal error", so the harness aborts and libFuzzer keeps the input as a crash; memory
// errors, undefined behaviour, leaks, hangs (-timeout) and huge allocations (-malloc_limit_mb)
// are caught by the sanitizers and libFuzzer themselves.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.h"

namespace sbp::fuzz {

// The input as a file at a fixed per-process path (most loaders take paths, as the CLI does).
inline std::string write_input(std::string_view name, const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::string d = "/tmp/streambp-fuzz-" + std::to_string(::getpid());
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    if (ec) std::abort();
    return d;
  }();
  const std::string path = dir + "/" + std::string(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  if (std::fclose(f) != 0) std::abort();
  return path;
}

// The directory write_input writes into.
inline std::string input_dir() {
  const std::string p = write_input(".probe", nullptr, 0);
  return p.substr(0, p.rfind('/'));
}

// Runs `body`; sbp::Error is the expected outcome of bad input, anything else aborts.
template <class F>
void expect_clean(F&& body) {
  try {
    body();
  } catch (const sbp::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: input reached a non-sbp exception (an internal error): %s\n",
                 e.what());
    std::abort();
  }
}

// Splits the input at the first occurrence of `sep`: [0, at) and (at, end); no separator puts
// everything in the first part.
inline std::pair<std::string_view, std::string_view> split_once(const uint8_t* data, size_t size,
                                                                std::string_view sep) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t at = all.find(sep);
  if (at == std::string_view::npos) return {all, {}};
  return {all.substr(0, at), all.substr(at + sep.size())};
}

}  // namespace sbp::fuzz
