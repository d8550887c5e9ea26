#include "data/prompt_records.h"


#include "core/error.h"
#include "core/untrusted_json.h"
#include "data/records.h"

namespace sbp {

namespace {

using json = nlohmann::json;

std::vector<int32_t> ids_field(const json& ids, int64_t vocab, const std::string& where) {
  if (!ids.is_array() || ids.empty())
    throw InputError(where + ": \"prompt_ids\" must be a non-empty array of token ids");
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) {
    if (!ids[t].is_number_integer() || ids[t].get<int64_t>() < 0 ||
        ids[t].get<int64_t>() >= vocab)
      throw InputError(where + ": prompt_ids[" + std::to_string(t) + "] = " + ids[t].dump() +
                       " is not a token id in [0, " + std::to_string(vocab) + ")");
    out.push_back(static_cast<int32_t>(ids[t].get<int64_t>()));
  }
  return out;
}

}  // namespace

std::vector<PromptRecord> read_prompt_records(const DataSource& source, const PromptEncoder* enc,
                                              int64_t vocab) {
  const std::string& path = source.name;
  const std::unique_ptr<std::istream> stream = source.open("the input file");
  std::istream& in = *stream;
  std::vector<PromptRecord> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    PromptRecord p;
    p.where = path + ":" + std::to_string(n);
    json row;
    try {
      row = parse_untrusted_json(line, p.where);
    } catch (const json::exception& e) {
      throw InputError(p.where + ": invalid JSON: " + e.what());
    }
    if (!row.is_object()) throw InputError(p.where + ": a prompt record must be a JSON object");
    if (row.contains("prompt_ids")) {
      // Two prompts in one record: which one the user meant is a guess (the text was silently
      // ignored), so the record is refused naming both.
      for (const char* other : {"prompt", "messages"})
        if (row.contains(other))
          throw InputError(p.where + ": both \"prompt_ids\" and \"" + other +
                           "\" are given; a record has one prompt");
      p.ids = ids_field(row["prompt_ids"], vocab, p.where);
    } else {
      const TextOrChat prompt = parse_generation_prompt(row, p.where);
      if (!enc)
        throw InputError(p.where + ": a text or conversation prompt needs a tokenizer; without "
                                   "one, give \"prompt_ids\"");
      p.ids = enc->encode(prompt, p.where);
      if (p.ids.empty()) throw InputError(p.where + ": the prompt encodes to no tokens");
      for (int32_t id : p.ids)
        if (id < 0 || id >= vocab)
          throw InputError(p.where + ": the tokenizer gives id " + std::to_string(id) +
                           " but the model's vocab_size is " + std::to_string(vocab));
    }
    if (enc) p.text = enc->tokenizer().decode(p.ids, /*skip_special=*/false);
    p.fields = json::object();
    for (auto it = row.begin(); it != row.end(); ++it)
      if (it.key() != "prompt" && it.key() != "prompt_ids" && it.key() != "messages")
        p.fields[it.key()] = it.value();
    out.push_back(std::move(p));
  }
  if (out.empty()) throw InputError(path + ": no prompts");
  return out;
}

bool looks_like_prompt_records(const DataSource& source) {
  std::unique_ptr<std::istream> stream;
  try {
    stream = source.open("the input file");
  } catch (const Error&) {
    return false;  // the dataset loader reports it
  }
  std::istream& in = *stream;
  std::string line;
  while (in && std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const json row = parse_untrusted_json_or_discarded(line);
      if (row.is_discarded()) return false;
      if (!row.is_object()) return false;
      for (const char* k : {"completion", "chosen", "rejected", "reward"})
        if (row.contains(k)) return false;
      return row.contains("prompt") || row.contains("prompt_ids");
    } catch (const json::exception&) {
      return false;
    }
  }
  return false;
}

}  // namespace sbp
