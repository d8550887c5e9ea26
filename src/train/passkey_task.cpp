#include "train/passkey_task.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"
#include "core/rng.h"
#include "core/untrusted_json.h"

namespace sbp {

namespace {

const char* const kIntro =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "it. I will quiz you about the important information there.";
const char* const kQuestion = " What is the pass key? The pass key is";

std::vector<int32_t> append(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

std::string builtin_filler_text() {
  return " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back "
         "again.";
}

std::string filler_text_from_jsonl(const std::string& path) {
  check_input_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the filler file");
  std::string text, line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = parse_untrusted_json_or_discarded(line);
    const std::string at = path + ":" + std::to_string(line_no);
    if (j.is_discarded() || !j.is_object()) throw InputError(at + ": not a JSON object");
    const auto t = j.find("text");
    if (t == j.end() || !t->is_string())
      throw InputError(at + ": needs a string field \"text\" (the filler's long texts)");
    if (!text.empty()) text += "\n\n";
    text += t->get<std::string>();
  }
  if (text.empty()) throw InputError(path + ": no text in the filler file");
  return text;
}

std::string passkey_for(uint64_t seed, int64_t length, int64_t depth_index, int64_t trial) {
  Rng rng(seed, "passkey/" + std::to_string(length) + "/" + std::to_string(depth_index) + "/" +
                    std::to_string(trial));
  return std::to_string(10000 + rng.next() % 90000);
}

PasskeySample make_passkey_sample(const Tokenizer& tok, std::optional<int32_t> bos,
                                  const std::vector<int32_t>& filler, int64_t length, double depth,
                                  const std::string& key) {
  if (!(depth >= 0.0 && depth <= 1.0))
    throw InputError("passkey: depth " + std::to_string(depth) + " is outside [0, 1]");
  if (filler.empty()) throw InputError("passkey: the filler has no tokens");
  std::vector<int32_t> head;
  if (bos) head.push_back(*bos);
  head = append(std::move(head), tok.encode(kIntro, false));
  const std::vector<int32_t> needle =
      tok.encode(" The pass key is " + key + ". Remember it. " + key + " is the pass key.", false);
  const std::vector<int32_t> question = tok.encode(kQuestion, false);
  const std::vector<int32_t> answer = tok.encode(" " + key, false);
  const int64_t fixed =
      static_cast<int64_t>(head.size() + needle.size() + question.size() + answer.size());
  if (length < fixed)
    throw InputError("passkey: length " + std::to_string(length) + " is shorter than the " +
                     std::to_string(fixed) + " tokens of the task's fixed texts");
  const int64_t n = length - fixed;
  const int64_t k = static_cast<int64_t>(std::floor(depth * static_cast<double>(n)));
  const int64_t F = static_cast<int64_t>(filler.size());
  PasskeySample s;
  s.key = key;
  s.tokens = std::move(head);
  s.tokens.reserve(static_cast<size_t>(length));
  for (int64_t i = 0; i < k; ++i) s.tokens.push_back(filler[static_cast<size_t>(i % F)]);
  s.needle_begin = static_cast<int64_t>(s.tokens.size());
  s.tokens = append(std::move(s.tokens), needle);
  for (int64_t i = k; i < n; ++i) s.tokens.push_back(filler[static_cast<size_t>(i % F)]);
  s.tokens = append(std::move(s.tokens), question);
  s.answer_begin = static_cast<int64_t>(s.tokens.size());
  s.tokens = append(std::move(s.tokens), answer);
  return s;
}

}  // namespace sbp
