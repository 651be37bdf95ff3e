// See chat_template.h. llama.cpp's engine comes from PyPI's llama-cpp-python source package
// (scripts/fetch_text_deps.sh); this file is the only one that sees its headers.
#include "io/chat_template.h"

#include <exception>

#include "core/error.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/runtime.h"
#include "json.h"

namespace megaops {

namespace {

// The engine's messages span lines ("While executing X at line L, column C in source:", a source
// excerpt, "Error: what"); the CLI promises one line, so this keeps what failed and where.
std::string one_line(const char* what) {
  std::string error, where, first;
  size_t start = 0;
  const std::string s(what);
  while (start <= s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    const std::string line = s.substr(start, end - start);
    if (line.rfind("Error: ", 0) == 0 && error.empty()) error = line.substr(7);
    if (line.rfind("While executing ", 0) == 0 && where.empty()) {
      where = line.substr(6);
      const size_t suffix = where.find(" in source:");
      if (suffix != std::string::npos) where.resize(suffix);
    }
    if (first.empty() && !line.empty() && line.find_first_not_of('-') != std::string::npos)
      first = line;
    start = end + 1;
  }
  if (error.empty()) return first;
  return where.empty() ? error : error + " (" + where + ")";
}

}  // namespace

struct ChatTemplate::Impl {
  std::string source, origin;
  jinja::program program;
};

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  impl->origin = origin;
  try {
    jinja::lexer lexer;
    impl->program = jinja::parse_from_tokens(lexer.tokenize(source));
  } catch (const std::exception& e) {
    throw InputError(origin + ": template does not parse: " + one_line(e.what()));
  }
  return ChatTemplate(std::move(impl));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& variables) const {
  if (!messages.is_array()) throw InputError(impl_->origin + ": messages: expected an array");
  if (!variables.is_object() && !variables.is_null())
    throw InputError(impl_->origin + ": variables: expected an object");
  nlohmann::ordered_json input = variables.is_null() ? nlohmann::ordered_json::object() : variables;
  input["messages"] = messages;
  try {
    jinja::context ctx(impl_->source);
    // The engine takes its own JSON type; the text form is the common ground (and invalid UTF-8
    // in a message is replaced, not thrown on, as Python's str would have been valid).
    const common_json in = common_json::parse(
        input.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    jinja::global_from_json(ctx, in, false);
    jinja::runtime runtime(ctx);
    const jinja::value results = runtime.execute(impl_->program);
    const auto parts = jinja::runtime::gather_string_parts(results);
    return parts->as_string().str();
  } catch (const std::exception& e) {
    throw InputError(impl_->origin + ": template failed to render: " + one_line(e.what()));
  }
}

const std::string& ChatTemplate::source() const {
  return impl_->source;
}

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

}  // namespace megaops
