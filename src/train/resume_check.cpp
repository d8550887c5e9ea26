#include "train/resume_check.h"

#include "core/error.h"

namespace sbp {

std::string check_resume_compatible(const TrainConfig& c, const TrainerState& s,
                                    const nlohmann::json& fingerprints, const std::string& ckpt,
                                    int ranks) {
  std::string note;
  const nlohmann::json now = c.to_json();
  for (const std::string& key : resume_identity_keys()) {
    const nlohmann::json before = s.config.contains(key) ? s.config[key] : nlohmann::json();
    if (key == "grad_accum" && s.ranks != ranks && before.is_number_integer()) {
      const int64_t then = before.get<int64_t>() * s.ranks, per_step = c.grad_accum * ranks;
      if (then != per_step)
        note = "a step now takes " + std::to_string(per_step) + " micro-batches (" +
               std::to_string(ranks) + " ranks x grad_accum " + std::to_string(c.grad_accum) +
               "), the checkpoint's run took " + std::to_string(then) + " (" +
               std::to_string(s.ranks) + " ranks x " + before.dump() +
               "): the data order is the same, grouped into steps differently";
      continue;
    }
    if (before != now[key]) {
      throw InputError(c.where(key) + ": resuming from " + ckpt + ": " + key + " is " +
                       now[key].dump() + " but the checkpoint was trained with " + before.dump() +
                       " (the data order would differ; start a new run instead)");
    }
  }
  for (const char* which : {"train", "eval"}) {
    const bool had = s.data_files.contains(which), has = fingerprints.contains(which);
    if (had && has && s.data_files[which]["fnv1a64"] != fingerprints[which]["fnv1a64"]) {
      throw InputError(fingerprints[which]["path"].get<std::string>() + ": resuming from " + ckpt +
                       ": the file changed since the checkpoint was written (" +
                       s.data_files[which]["bytes"].dump() + " bytes then, " +
                       fingerprints[which]["bytes"].dump() + " now)");
    }
  }
  return note;
}

}  // namespace sbp
