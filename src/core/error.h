// Typed errors for megaops. Library code throws these (never exits); the CLI catches them at the
// top, prints the one-line message and returns a non-zero status. Messages name what was wrong:
// file, field, expected vs found.
#pragma once

#include <stdexcept>
#include <string>

namespace megaops {

// Base of every error megaops throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input: a malformed checkpoint, config, CLI argument or request.
class InputError : public Error {
 public:
  using Error::Error;
};

// A failure reported by the CUDA runtime or a CUDA library, or a device-side error record.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// Builds "file: field: message" for input errors so every one reads the same way.
inline std::string input_error_message(const std::string& file, const std::string& field,
                                       const std::string& message) {
  std::string out = file;
  if (!field.empty()) out += ": " + field;
  return out + ": " + message;
}

[[noreturn]] inline void throw_input_error(const std::string& file, const std::string& field,
                                           const std::string& message) {
  throw InputError(input_error_message(file, field, message));
}

}  // namespace megaops
