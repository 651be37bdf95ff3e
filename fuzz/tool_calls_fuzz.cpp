// libFuzzer target for reading tool calls out of chat replies (serve/tool_calls.h): for any reply
// text, in either format, the whole split must not crash, its calls must carry a name and
// arguments that parse as a JSON object, and the streamed split, the text cut where the input
// says, must give the same content and calls. The first byte picks the format, the second the
// cut pattern. Seed corpus: fuzz/corpus/tool_calls/.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "serve/tool_calls.h"

using megaops::serve::ParsedReply;
using megaops::serve::ToolCallFormat;
using megaops::serve::ToolCallStream;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const ToolCallFormat format = data[0] % 2 ? ToolCallFormat::Hermes : ToolCallFormat::Llama3Json;
  const size_t step = 1 + data[1] % 17;
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
  int n = 0;
  const auto ids = [&n] { return "call_" + std::to_string(n++); };
  const ParsedReply whole = megaops::serve::extract_tool_calls(format, text, ids);
  for (const auto& c : whole.calls) {
    if (c.name.empty()) __builtin_trap();
    const nlohmann::json args = nlohmann::json::parse(c.arguments, nullptr, false);
    if (!args.is_object()) __builtin_trap();
  }
  n = 0;
  ToolCallStream s(format, ids);
  std::string content;
  for (size_t at = 0; at < text.size(); at += step) content += s.feed(text.substr(at, step));
  ParsedReply end = s.finish();
  content += end.content;
  if (content != whole.content || end.calls.size() != whole.calls.size()) __builtin_trap();
  for (size_t i = 0; i < end.calls.size(); ++i)
    if (end.calls[i].name != whole.calls[i].name ||
        end.calls[i].arguments != whole.calls[i].arguments)
      __builtin_trap();
  return 0;
}
