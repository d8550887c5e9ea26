#pragma once
// The one rule for outputs that overlap the run's own inputs, and for directories streambp may
// replace or delete. Outputs are written over, renamed over or deleted, so an output path that
// is (or holds, or lies inside) an input would destroy what the command reads: `merge --out`
// equal to `--model` overwrote the base, `generate --output X --input X` the prompts, and
// `overwrite_output_dir: true` deleted a run's own model or data when they lived under
// output_dir. A directory is replaced or deleted only when every file in it is one streambp
// writes there: any other file is the user's.
#include <functional>
#include <string>
#include <vector>

namespace sbp {

// A path and the flag or key that named it (for the message).
struct NamedPath {
  std::string name;  // "--model", "data.train", ...
  std::string path;
};

// True if `inner` is `outer` or lies inside it, compared after resolving symlinks and `..` in
// the parts that exist (weakly_canonical): `out/../model` and a link to the model are the model.
bool path_within(const std::string& inner, const std::string& outer);

// InputError("--out X is --model Y: ...") if `out` is, lies inside or holds one of `inputs`.
// Inputs that do not exist (a preset name, an unset flag) are skipped.
void refuse_output_over_inputs(const NamedPath& out, const std::vector<NamedPath>& inputs);

// The first entry of `dir` (sorted by name, so the message is stable) that `ours` does not
// accept as a file streambp wrote there; a subdirectory, a symlink or anything but a regular
// file is always foreign. "" when every entry is ours (or `dir` is empty).
std::string first_foreign_file(const std::string& dir,
                               const std::function<bool(const std::string& name)>& ours);

}  // namespace sbp
