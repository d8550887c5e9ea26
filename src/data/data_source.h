#pragma once
// Where a JSONL data set comes from: a file, or the same lines held in memory (the Python
// package's list of dicts or datasets.Dataset, python/streambp/_train.py, one JSON object per
// line as a file holds them). Both are read by the same readers (dataset.h, prompt_records.h),
// so a record in memory is parsed, validated, refused and numbered exactly as the same line of
// a file: "data.train (in memory):3" is the third record.
#include <istream>
#include <memory>
#include <string>

namespace sbp {

struct DataSource {
  std::string name;                         // the file's path, or "<key> (in memory)"
  std::shared_ptr<const std::string> text;  // the lines in memory; null: the file `name`

  DataSource() = default;
  // A file (as every reader took a path before lines could come from memory).
  DataSource(std::string path) : name(std::move(path)) {}  // NOLINT: a path is a source
  // `lines` null: the file `name`.
  DataSource(std::string label, std::shared_ptr<const std::string> lines)
      : name(std::move(label)), text(std::move(lines)) {}

  bool in_memory() const { return text != nullptr; }
  // The lines to read: the file after check_input_file (InputError naming it when it cannot be
  // opened; `what` says which file it was, e.g. "data file"), or a stream over the text.
  std::unique_ptr<std::istream> open(const std::string& what) const;
};

// The config value a key holds when its records were given in memory: `key` + " (in memory)".
std::string in_memory_label(const std::string& key);

}  // namespace sbp
