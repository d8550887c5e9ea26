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
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "data/data_source.h"

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

// Differential check of data/data_source.h: `load(source)` (a summary of what it read, as text)
// on the file `path` and on the same bytes held in memory under `label` must agree: the same
// summary, or the same sbp::Error message once the file's path is replaced by the label. The
// Python package's records take the memory path; the program's files the other.
template <class Load>
void expect_same_from_memory(const std::string& path, const uint8_t* data, size_t size,
                             const std::string& label, Load load) {
  auto outcome = [&](const sbp::DataSource& source) -> std::string {
    try {
      return "ok: " + load(source);
    } catch (const sbp::Error& e) {
      std::string m = e.what();
      for (size_t at; (at = m.find(path)) != std::string::npos;) m.replace(at, path.size(), label);
      return "error: " + m;
    }
  };
  const std::string from_file = outcome(sbp::DataSource(path));
  const std::string from_memory = outcome(sbp::DataSource(
      label, std::make_shared<const std::string>(reinterpret_cast<const char*>(data), size)));
  if (from_file != from_memory) {
    std::fprintf(stderr, "fuzz: the file and the same bytes in memory differ:\n  %s\n  %s\n",
                 from_file.c_str(), from_memory.c_str());
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
