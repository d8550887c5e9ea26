#include "core/output_paths.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace sbp {

namespace fs = std::filesystem;

namespace {

fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) r = fs::absolute(p, ec).lexically_normal();
  // "dir/" and "dir" are the same directory: drop the empty last component.
  if (!r.empty() && r.filename().empty()) r = r.parent_path();
  return r;
}

}  // namespace

bool path_within(const std::string& inner, const std::string& outer) {
  const fs::path in = resolved(inner), out = resolved(outer);
  auto i = in.begin();
  for (auto o = out.begin(); o != out.end(); ++o, ++i)
    if (i == in.end() || *i != *o) return false;
  return true;
}

void refuse_output_over_inputs(const NamedPath& out, const std::vector<NamedPath>& inputs) {
  if (out.path.empty()) return;
  // A device or FIFO (/dev/stdout, as --input /dev/stdin may resolve to the same terminal) is
  // written through, never replaced: it cannot destroy an input.
  std::error_code ec;
  const auto st = fs::status(out.path, ec).type();
  if (st == fs::file_type::character || st == fs::file_type::fifo) return;
  for (const NamedPath& in : inputs) {
    if (in.path.empty() || !fs::exists(in.path, ec)) continue;
    const char* how = path_within(out.path, in.path)   ? (path_within(in.path, out.path)
                                                              ? " is "
                                                              : " is inside ")
                      : path_within(in.path, out.path) ? " holds "
                                                       : nullptr;
    if (!how) continue;
    throw InputError(out.name + " " + out.path + how + in.name + " " + in.path +
                     ": refusing to write over an input; choose another " + out.name);
  }
}

std::string first_foreign_file(const std::string& dir,
                               const std::function<bool(const std::string& name)>& ours) {
  std::error_code ec;
  std::vector<std::string> foreign;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!ours(name) || e.is_symlink(ec) || !e.is_regular_file(ec)) foreign.push_back(name);
  }
  if (ec && foreign.empty()) return "(unreadable: " + ec.message() + ")";
  if (foreign.empty()) return "";
  return *std::min_element(foreign.begin(), foreign.end());
}

}  // namespace sbp
