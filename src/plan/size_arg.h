#pragma once
// Byte sizes on the command line: "80GiB", "2.5GB", "512MiB", "1e9", "123456" (bytes).
#include <cstdint>
#include <string>

namespace sbp {

// Decimal units (kB/KB, MB, GB, TB: powers of 1000) and binary units (KiB, MiB, GiB, TiB:
// powers of 1024), case-insensitive, optional "B" alone; a number without a unit is bytes.
// Throws InputError naming `field` for anything else, negative values or more than 2^62.
int64_t parse_size(const std::string& text, const std::string& field);

}  // namespace sbp
