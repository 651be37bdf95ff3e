// See chat_template.h. llama.cpp's engine comes from PyPI's llama-cpp-python source package
// (scripts/fetch_text_deps.sh); this file is the only one that sees its headers.
#include "io/chat_template.h"

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <functional>

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

// llama.cpp's parser recurses once per nesting level with no bound of its own (the template fuzzer
// overflowed the stack with a few thousand '('), so a template's nesting is bounded before it is
// parsed, and parsing and rendering run on a thread with a stack sized for that bound (most of it
// never touched). Rendering's own bounds (steps of work, macro call depth, string sizes) are in
// the engine: scripts/patches/llama-cpp-jinja-work-bounds.patch.
constexpr int MAX_NESTING = 256;
constexpr size_t MAX_KEYWORDS = 4096;  // "if" / "not" / "for": each may open a recursion level
constexpr size_t ENGINE_STACK_BYTES = size_t{512} << 20;

void check_nesting(const std::string& source, const std::string& origin) {
  int depth = 0, max_depth = 0;
  for (char c : source) {
    if (c == '(' || c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
  }
  if (max_depth > MAX_NESTING)
    throw InputError(origin + ": template nests brackets " + std::to_string(max_depth) +
                     " deep; expected at most " + std::to_string(MAX_NESTING));
  for (const char* word : {"if", "not", "for", "-", "+", "~"}) {
    size_t n = 0;
    for (size_t at = source.find(word); at != std::string::npos; at = source.find(word, at + 1))
      ++n;
    if (n > MAX_KEYWORDS)
      throw InputError(origin + ": template has " + std::to_string(n) + " '" + word +
                       "'; expected at most " + std::to_string(MAX_KEYWORDS));
  }
}

// Runs fn on a thread with a large stack and rethrows what it threw.
void run_with_large_stack(const std::function<void()>& fn) {
  struct Call {
    const std::function<void()>* fn;
    std::exception_ptr error;
  } call{&fn, nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, ENGINE_STACK_BYTES);
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      [](void* arg) -> void* {
        auto* c = static_cast<Call*>(arg);
        try {
          (*c->fn)();
        } catch (...) {
          c->error = std::current_exception();
        }
        return nullptr;
      },
      &call);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    fn();  // no thread to be had: the caller's stack, with the nesting bound above
  } else {
    pthread_join(thread, nullptr);
  }
  if (call.error) std::rethrow_exception(call.error);
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
  check_nesting(source, origin);
  run_with_large_stack([&] {
    try {
      jinja::work_budget::reset();  // a fresh budget for what the parser's strings cost
      jinja::lexer lexer;
      impl->program = jinja::parse_from_tokens(lexer.tokenize(source));
    } catch (const std::exception& e) {
      throw InputError(origin + ": template does not parse: " + one_line(e.what()));
    }
  });
  return ChatTemplate(std::move(impl));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& variables) const {
  if (!messages.is_array()) throw InputError(impl_->origin + ": messages: expected an array");
  if (!variables.is_object() && !variables.is_null())
    throw InputError(impl_->origin + ": variables: expected an object");
  nlohmann::ordered_json input = variables.is_null() ? nlohmann::ordered_json::object() : variables;
  input["messages"] = messages;
  std::string rendered;
  run_with_large_stack([&] {
    try {
      jinja::work_budget::reset();  // converting the input is charged; execute() starts afresh
      jinja::context ctx(impl_->source);
      // The engine takes its own JSON type; the text form is the common ground (and invalid UTF-8
      // in a message is replaced, not thrown on, as Python's str would have been valid).
      const common_json in = common_json::parse(
          input.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
      jinja::global_from_json(ctx, in, false);
      jinja::runtime runtime(ctx);
      const jinja::value results = runtime.execute(impl_->program);
      const auto parts = jinja::runtime::gather_string_parts(results);
      rendered = parts->as_string().str();
    } catch (const std::exception& e) {
      throw InputError(impl_->origin + ": template failed to render: " + one_line(e.what()));
    }
  });
  return rendered;
}

uint64_t ChatTemplate::render_step_limit() {
  return jinja::work_budget::max_steps();
}

void ChatTemplate::set_render_step_limit(uint64_t steps) {
  jinja::work_budget::set_max_steps(steps);
}

const std::string& ChatTemplate::source() const {
  return impl_->source;
}

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

}  // namespace megaops
