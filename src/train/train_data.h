#pragma once
// The data side of a training run, from its config: the tokenizer and its tokenizer_config.json,
// the chat template (detected or named), the train and eval datasets tokenized and checked
// against the objective, and the fingerprints a resumed run compares.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "data/dataset.h"
#include "train/train_config.h"

namespace sbp {

struct TrainingData {
  std::optional<ChatTemplate> chat;
  std::string chat_source;      // "tokenizer_config.json" or "data.chat_template"
  Dataset train;                // its examples are the training set (eval_fraction removed)
  std::string train_summary;    // Dataset::summary() of the whole file, before any split
  std::vector<Example> eval;    // held-out examples (empty: no evaluation)
  std::string eval_source;      // "data.eval (<path>)", "5% of data.train", ""
  nlohmann::json fingerprints;  // {"train": ..., "eval": ...} (checkpoint.h data_fingerprint)
};

// Loads everything; `model_vocab` bounds the tokenizer's ids. Prints nothing.
TrainingData prepare_training_data(const TrainConfig& c, int64_t model_vocab);

// The record formats an objective trains on.
bool objective_accepts(ObjectiveKind objective, DataFormat f);

// Splits `fraction` of the examples off as a held-out set, chosen by a seeded shuffle; both
// parts keep file order. At least one example goes to each side when fraction > 0.
void split_eval(std::vector<Example>& train, std::vector<Example>& eval, double fraction,
                uint64_t seed);

}  // namespace sbp
