#pragma once
// What the ranks of one `mpirun -np N streambp train` must share (dist/rank_agreement.h checks
// it at start-up, before any other collective): every resolved config key that shapes the run
// (all of them but `threads`, a property of each rank's machine), and the content of every input
// named by a path — the model, tokenizer, data, reference and value models, LoRA adapter and the
// checkpoint resumed from — rather than the path itself, so ranks on machines that mount the
// same files elsewhere still agree, and ranks whose files differ under the same path do not.
// output_dir and metrics are compared as paths: every rank writes under the same directory.
//
// Inputs are digested by content: small files (configs, tokenizers, data) whole, safetensors
// weights by size and header (names, dtypes, shapes, offsets) and then every tensor's bytes
// (dist/weight_digest.h: one XXH64 pass at memory speed; the run's load then reads the files
// from the page cache), so that ranks with the same shapes but other weights disagree too. A path that cannot be read is recorded as such, not thrown: the
// ranks then disagree, or all fail alike when the run loads it.
#include <string>
#include <vector>

#include "dist/rank_agreement.h"
#include "train/train_config.h"

namespace sbp {

// The list in its canonical order (the same on every rank for the same build): the config keys
// in sorted order (those whose default derives from another key last), then the inputs in a
// fixed order, each directory's files sorted by name. `resume` is the --resume argument ("" for a
// fresh run).
std::vector<AgreedSetting> settings_ranks_must_share(const TrainConfig& c,
                                                     const std::string& resume);

// The entries of one input path under `key`: the file's digest; or "directory" and then one
// entry "<key>/<name>" per regular file in it; or what is there instead ("no such file: <path>", a preset name).
// `whole_content`: a file is hashed whole whatever its size (data); otherwise files over 64 MiB
// are recorded by size only, and *.safetensors by size and header plus one entry per tensor
// ("<key>: <tensor>", its bytes' digest), optimizer shards excepted.
void append_input_digests(std::vector<AgreedSetting>& out, const std::string& key,
                          const std::string& path, bool whole_content);

}  // namespace sbp
