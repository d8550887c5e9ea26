#pragma once
// Ranks of one `mpirun` must run the same training: the same settings, model, data and
// checkpoint. Ranks that disagree do not fail by themselves — different shapes crash inside MPI,
// a different step count leaves the other rank waiting in a collective for ever, a different
// learning rate trains quietly to exit 0. So before any other collective every rank checks that
// all ranks hold the same list of settings, and if not, every rank stops with the same one-line
// error naming the first key (in the list's order) that differs.
//
// What the list holds is the caller's business (train/rank_settings.h builds it for `train`);
// this file only compares lists across ranks. Plain functions over values: no state.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"

namespace sbp {

// One setting that every rank must share: a key ("optim.lr", "model/config.json") and its value
// as text (a short value itself, or a digest of something large: "812 bytes, fnv1a64 ...").
struct AgreedSetting {
  std::string key;
  std::string value;
};

// Every rank found the same disagreement and throws this same error, so the caller may end the
// run on each rank by itself (no MPI_Abort needed: no rank is left waiting in a collective).
class RanksDisagree : public InputError {
 public:
  using InputError::InputError;
};

// FNV-1a 64 over bytes, continuing from `h` (the start value by default).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);
std::string hex_digest(uint64_t x);  // 16 lower-case hex digits

// One digest of the whole list (keys, values and their boundaries): what ranks exchange first.
uint64_t settings_digest(const std::vector<AgreedSetting>& s);

// The list as one string and back (what ranks exchange when the digests differ). Keys and values
// may hold any byte: each is written with its length.
std::string encode_settings(const std::vector<AgreedSetting>& s);
// Throws Error on a malformed encoding.
std::vector<AgreedSetting> decode_settings(const std::string& text);

// The message naming the first disagreement among `lists` (one per rank, rank order), or
// nothing when every rank holds the same list. The first disagreement is at the first position
// where some rank's entry differs from rank 0's; its key is rank 0's there (or the other rank's,
// if it sorts first and rank 0 lacks it). Shown: rank 0's value and that of the lowest rank that
// differs, each as itself when short, else as a digest; "(none)" for a rank without the key.
std::optional<std::string> first_disagreement(const std::vector<std::vector<AgreedSetting>>& lists);

// The exchange, collective over `comm`: one fixed-size reduction of each rank's digest and
// count; only when they differ, every rank's whole list. Throws RanksDisagree on every rank (with
// the same message) when they differ; returns on every rank when they agree.
void check_ranks_agree(Communicator& comm, const std::vector<AgreedSetting>& mine);

}  // namespace sbp
