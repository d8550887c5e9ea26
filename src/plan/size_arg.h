#pragma once
// Sizes as a config or a command line gives them: bytes ("80GiB", "2.5GB", "512MiB", "1e9",
// "123456") and chunk rows ("2048", or "auto": the largest that fits the budget).
#include <cstdint>
#include <optional>
#include <string>

namespace sbp {

// Decimal units (kB/KB, MB, GB, TB: powers of 1000) and binary units (KiB, MiB, GiB, TiB:
// powers of 1024), case-insensitive, optional "B" alone; a number without a unit is bytes.
// Throws InputError naming `field` for anything else, negative values or more than 2^62.
int64_t parse_size(const std::string& text, const std::string& field);

// A chunk size (layer_chunk, head_chunk, --layer-chunk, --head-chunk): `auto` is 0 (the planner
// chooses, train/auto_chunks.h and plan/planner.h), else a positive decimal integer; nullopt for
// anything else. The one place `auto` is read.
std::optional<int64_t> parse_chunk_size(const std::string& text);
// The same for a flag: InputError "FLAG: 'TEXT' is neither a positive number of rows nor auto".
int64_t parse_chunk_flag(const std::string& text, const std::string& flag);

}  // namespace sbp
