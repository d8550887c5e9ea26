#pragma once
// Input paths are checked before they are opened: a directory read as a file fails with a
// generic stream error, and opening a FIFO for reading blocks until a writer comes (forever).
#include <string>

namespace sbp {

// Throws InputError "PATH: is a directory, not a regular file" / "PATH: is not a regular file
// (...)" when `path` exists and is not a regular file (symlinks are followed). A missing path is
// left to the caller, whose message says which file it wanted.
void check_input_file(const std::string& path);

// The whole file, after check_input_file; InputError naming `path` if it cannot be read.
std::string read_input_file(const std::string& path);

}  // namespace sbp
