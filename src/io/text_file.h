// Whole-file reads for the small text files megaops takes (config.json, index files, plans,
// profiles), with the same error for every caller.
#pragma once

#include <string>

namespace megaops {

// The file's bytes. Throws InputError "PATH: cannot open (missing or unreadable)" or
// "PATH: read failed".
std::string read_text_file(const std::string& path);

}  // namespace megaops
