// Tool calls in a chat completion's text: what the model wrote in its template's tool-call format,
// turned into OpenAI's message.tool_calls (as vLLM's tool parsers and llama.cpp's server do).
// Two formats, the ones the Llama 3 and Qwen 3 templates teach their models:
//  - hermes (Qwen 2.5 / 3, Hermes): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`,
//    any number of them, text around them staying content;
//  - llama3_json (Llama 3.1 / 3.2 / 3.3): the whole reply is one JSON object
//    `{"name": ..., "parameters": {...}}` (or several separated by ';'), after an optional
//    <|python_tag|>.
// What does not parse as a call stays content: a model that writes "<tool_call>" and then no JSON
// gets its text back, not an error.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace megaops::serve {

enum class ToolCallFormat { None, Hermes, Llama3Json };

// "none", "hermes", "llama3_json".
const char* tool_call_format_name(ToolCallFormat f);
// Parses a --tool-call-parser value ("auto" is the caller's to resolve); throws InputError
// naming `field` on anything else.
ToolCallFormat parse_tool_call_format(const std::string& name, const std::string& field);
// The format a chat template teaches: hermes if it writes <tool_call>, llama3_json if it asks for
// {"name": ..., "parameters": ...} replies (Llama 3.1's "parameters" with "ipython"), else None.
ToolCallFormat detect_tool_call_format(const std::string& chat_template);

struct ToolCall {
  std::string id;         // "chatcmpl-tool-<hex>", from the caller's generator
  std::string name;       // the function's name
  std::string arguments;  // its arguments as JSON text (OpenAI's "arguments" is a string)
};

struct ParsedReply {
  std::string content;  // the text that is not a call (possibly empty)
  std::vector<ToolCall> calls;
};

// Splits a whole reply into content and calls. `make_id` names each call.
ParsedReply extract_tool_calls(ToolCallFormat f, const std::string& text,
                               const std::function<std::string()>& make_id);

// The same split for a reply that arrives in pieces: feed() returns the content that can go to the
// client now (never a piece of a call or of its opening marker), finish() the rest of the content
// and the calls. The content of feed() + finish() equals extract_tool_calls' content.
class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat f, std::function<std::string()> make_id);
  std::string feed(const std::string& delta);
  ParsedReply finish();

 private:
  ToolCallFormat format_;
  std::function<std::string()> make_id_;
  std::string held_;  // text not sent yet: a possible marker prefix, or everything from a call on
  bool in_call_ = false;  // a call's opening was seen: everything from there waits for finish()
  bool decided_ = false;  // llama3_json: the reply's first non-space character was seen
};

}  // namespace megaops::serve
