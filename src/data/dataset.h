#pragma once
// A JSONL dataset, tokenized: every record parsed and validated (data/records.h), rendered and
// tokenized (data/example_encoder.h), checked against the length limits, and turned into
// Examples — the units packing places whole into one micro-batch:
//
//   SFT          one sequence per record
//   preference   two sequences (chosen, rejected) per record: DPO needs both in one pass
//   rollout      one group per distinct prompt: all its completions, with their rewards
//
// Errors name the file and line ("data.jsonl:17: ...") and stop the load; nothing is skipped
// silently (the truncation policy decides what happens to over-long examples, and the counts
// are in Dataset::stats).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "data/data_source.h"
#include "data/example_encoder.h"
#include "data/records.h"

namespace sbp {

// What to do with a sequence longer than max_seq_len, or an example (pair, group) longer than
// the micro-batch token budget.
enum class Truncation { error, truncate, skip };
inline constexpr EnumName<Truncation> kTruncationNames[] = {
    {Truncation::error, "error"}, {Truncation::truncate, "truncate"}, {Truncation::skip, "skip"}};

struct Example {
  std::vector<TokenizedSequence> sequences;  // packed side by side as separate segments
  std::vector<double> rewards;               // rollout groups: one per sequence
  std::vector<int64_t> lines;                // source line of each sequence's record
  int64_t tokens() const;
  int64_t loss_tokens() const;
};

struct DatasetOptions {
  std::optional<DataFormat> format;  // nullopt: detect from the first record
  int64_t max_seq_len = 4096;        // tokens per sequence
  int64_t max_tokens = 4096;         // tokens per example (the micro-batch budget)
  Truncation truncation = Truncation::error;
};

struct DatasetStats {
  int64_t records = 0;
  int64_t truncated = 0;        // sequences cut to max_seq_len
  int64_t skipped = 0;          // records (or whole groups) left out by truncation: skip
  int64_t dropped_no_loss = 0;  // examples whose trained tokens were all cut off by truncation
  int64_t inexact = 0;          // sequences tokenized range by range (masked_encoding.h)
  int64_t tokens = 0;
  int64_t loss_tokens = 0;
  int64_t longest = 0;  // tokens of the longest sequence
};

struct Dataset {
  std::string path;
  DataFormat format = DataFormat::messages;
  std::vector<Example> examples;
  DatasetStats stats;
  // "train.jsonl: 96 messages records -> 96 examples, 5123 tokens (2345 trained), longest 80"
  std::string summary() const;
};

// Reads and tokenizes `source` (a file, or its lines in memory). Tokenization runs on the OpenMP
// threads; the result does not depend on their number.
Dataset load_dataset(const DataSource& source, const ExampleEncoder& encoder,
                     const DatasetOptions& opts);

}  // namespace sbp
