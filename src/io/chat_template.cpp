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

// The engine's messages carry a source excerpt on the lines after the first; the CLI promises one
// line, and the first says what and where.
std::string first_line(const char* what) {
  std::string s(what);
  const size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
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
    throw InputError(origin + ": template does not parse: " + first_line(e.what()));
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
    throw InputError(impl_->origin + ": template failed to render: " + first_line(e.what()));
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
