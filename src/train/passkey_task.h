#pragma once
// Passkey retrieval, the long-context test of issue 52 (streambp eval): a random 5-digit key is
// hidden at a relative depth of a filler text of a given length in tokens, and the model is
// asked for it at the end. The sample is built in tokens, so its length is exact:
//
//   [bos] intro  filler[0, k)  needle  filler[k, n)  question  answer
//
// intro:    "There is an important info hidden inside a lot of irrelevant text. Find it and
//           memorize it. I will quiz you about the important information there."
// needle:   " The pass key is <key>. Remember it. <key> is the pass key."
// question: " What is the pass key? The pass key is"
// answer:   " <key>"
// n filler tokens fill the length; the needle goes in after k = floor(depth * n) of them. Each
// text is tokenized on its own (no merge across the joins), the same way every time.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace sbp {

struct PasskeySample {
  std::vector<int32_t> tokens;  // the whole sequence, the answer last
  int64_t needle_begin = 0;     // index of the needle's first token
  int64_t answer_begin = 0;     // index of the answer's first token
  std::string key;
};

// The filler: token ids used in order and from the start again when a sample needs more.
// builtin_filler_text(): the classic "The grass is green. The sky is blue. ..." sentences.
std::string builtin_filler_text();
// A JSONL file of {"text": ...} records, joined by blank lines. Throws InputError naming the
// file and line for a record without a string "text", and for a file without text.
std::string filler_text_from_jsonl(const std::string& path);

// The key of cell (length, depth index, trial) of a run seeded with `seed`: 5 digits, the
// first nonzero.
std::string passkey_for(uint64_t seed, int64_t length, int64_t depth_index, int64_t trial);

// One sample of exactly `length` tokens. Throws InputError when the fixed texts do not fit in
// `length`, or for a depth outside [0, 1] or an empty filler.
PasskeySample make_passkey_sample(const Tokenizer& tok, std::optional<int32_t> bos,
                                  const std::vector<int32_t>& filler, int64_t length, double depth,
                                  const std::string& key);

}  // namespace sbp
