// See text_file.h.
#include "io/text_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace megaops {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input_error(path, "", "cannot open (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw_input_error(path, "", "read failed");
  return text.str();
}

}  // namespace megaops
