#pragma once
// streambp eval's outputs (train/long_eval.h): the passkey table (depth down, length across),
// the perplexity-by-position table, their JSON, and the passkey heat map (a PNG or SVG drawn by
// gnuplot: depth x length, the colour the fraction of keys found, each cell labelled).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/long_eval.h"

namespace sbp {

std::string passkey_table(const std::vector<PasskeyCell>& cells);
std::string perplexity_table(const std::vector<PositionBucket>& buckets);
nlohmann::json passkey_json(const std::vector<PasskeyCell>& cells);
nlohmann::json perplexity_json(const std::vector<PositionBucket>& buckets);

// Writes the heat map to `out` (.png or .svg) through the one output rule; throws InputError
// for another extension, a missing gnuplot or its failure.
void write_passkey_heatmap(const std::vector<PasskeyCell>& cells, const std::string& out,
                           const std::string& title, const std::string& gnuplot = "gnuplot");

}  // namespace sbp
