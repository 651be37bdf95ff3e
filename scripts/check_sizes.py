#!/usr/bin/env python3
"""Fails when a source file under src/ or tools/ is over 800 lines or a function in it over 150.

Issue 37: a file a reader can hold in mind, a function that fits on a few screens. A file's size
is its line count; a function's is the span from the line of its name to its closing brace.
Functions are found by a brace-matching heuristic after blanking comments, string and character
literals and preprocessor lines: a `{` at namespace or class scope whose head (the text since the
previous `;`, `{` or `}`) has a parameter list and no top-level `=` opens a function body (a
constructor's member initialisers such as `x_{a}` are followed into the body). Everything inside a
body, lambdas and local classes included, counts toward the enclosing function.

Offenders that live in files other work owns today are listed in ALLOWED, each with the reason.
The check fails on an offender that is not listed, and on a listed one that no longer offends
(delete its entry: the list only shrinks).

  python3 scripts/check_sizes.py [--root DIR]     # check the tree (default: this repository)
  python3 scripts/check_sizes.py selftest         # the checker catches a planted oversize file/function
"""
import os
import re
import sys
import tempfile

from tree_check import Expectations, main, write

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 150
DIRS = ("src", "tools")
SOURCE_EXTS = (".h", ".cuh", ".cpp", ".cu")
FILE = "<file>"  # the function name of an ALLOWED entry for the file's own size

# (file, function name or FILE) -> why it is still over the limit. Remove an entry with the offence.
ALLOWED = {}

# Identifiers whose parenthesised argument is not the parameter list of the function they precede.
NOT_A_NAME = {"__launch_bounds__", "__align__", "alignas", "__attribute__", "__declspec",
              "decltype", "noexcept", "throw", "requires", "__nv_register_params__"}
NAME_RE = re.compile(r"(~?[A-Za-z_]\w*(?:\s*::\s*~?[A-Za-z_]\w*)*|operator\s*(?:\(\)|[^\s(]+))\s*$")


def blank(text):
    """`text` with comments, string/char literals and preprocessor lines blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        at_line_start = False
        if c == "\n":
            at_line_start = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('"', i + 1) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator (1'000)
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " ")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_close(code, i, open_ch="{", close_ch="}"):
    """Index of the bracket closing the one at `i` (len(code) if unbalanced)."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_ch:
            depth += 1
        elif code[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j
    return len(code)


def strip_template_prefix(head):
    """`head` without leading `template <...>` clauses and access specifiers."""
    while True:
        s = head.lstrip()
        m = re.match(r"(public|private|protected)\s*:(?!:)", s)
        if m:
            head = s[m.end():]
            continue
        m = re.match(r"template\s*<", s)
        if not m:
            return head
        depth, j = 0, m.end() - 1
        while j < len(s):
            if s[j] == "<":
                depth += 1
            elif s[j] == ">":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        head = s[j + 1:]


def top_level(head):
    """`head` with everything inside parentheses removed (the parentheses kept)."""
    out, depth = [], 0
    for c in head:
        if c == "(":
            if depth == 0:
                out.append(c)
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                out.append(c)
        elif depth == 0:
            out.append(c)
    return "".join(out)


def classify(head):
    """'ns', 'class' or 'other' for the scope a `{` opens, or the function's name (a str in a tuple)."""
    h = strip_template_prefix(head).strip()
    if re.match(r"(inline\s+)?namespace\b", h) or re.fullmatch(r'extern\s*"\s*"', h):
        return "ns"
    if re.match(r"(typedef\s+)?(class|struct|union)\b", h):
        return "class"
    if re.match(r"(typedef\s+)?enum\b", h) or "(" not in h:
        return "other"
    top = re.sub(r"operator\s*(\(\)|[^\s(]+)", "operator", top_level(h))
    if "=" in top:
        return "other"  # an initialiser: `kTable[] = {`, `auto f = [](...) {`
    # The name precedes the first parameter list that is not an attribute's argument.
    depth = 0
    for j, c in enumerate(h):
        if c == "(":
            if depth == 0:
                m = NAME_RE.search(h[:j])
                if m and m.group(1) not in NOT_A_NAME:
                    return (re.sub(r"\s+", "", m.group(1)), j)
            depth += 1
        elif c == ")":
            depth -= 1
    return "other"


def function_end(code, open_pos):
    """Closing brace of the body opened at `open_pos`, following constructor initialisers
    (`: a_{x}, b_(y) {`) into the body."""
    close = match_close(code, open_pos)
    while True:
        j = close + 1
        while j < len(code) and code[j].isspace():
            j += 1
        if j >= len(code) or code[j] not in ",{":
            return close
        if code[j] == "{":
            close = match_close(code, j)
            continue
        k = j + 1  # after `,`: skip `name(...)` / `name{...}` to the next brace at this level
        while k < len(code) and code[k] != "{":
            if code[k] == "(":
                k = match_close(code, k, "(", ")")
            elif code[k] in ";}":
                return close
            k += 1
        if k >= len(code):
            return close
        close = match_close(code, k)


def functions_of(text):
    """[(name, first line, lines)] of the function definitions in `text`."""
    code = blank(text)
    out, stack, head_start, i = [], ["ns"], 0, 0
    line_of = lambda pos: code.count("\n", 0, pos) + 1
    while i < len(code):
        c = code[i]
        if c == ";":
            head_start = i + 1
        elif c == "}":
            if len(stack) > 1:
                stack.pop()
            head_start = i + 1
        elif c == "{":
            kind = classify(code[head_start:i])
            if kind in ("ns", "class"):
                stack.append(kind)
                head_start = i + 1
            else:
                close = function_end(code, i) if isinstance(kind, tuple) else match_close(code, i)
                if isinstance(kind, tuple):
                    name, paren = kind
                    h = code[head_start:i]
                    # The line of the name: the head's own offset of the parameter list.
                    name_pos = head_start + len(h) - len(strip_template_prefix(h).lstrip()) + paren
                    first = line_of(name_pos)
                    out.append((name, first, line_of(close) - first + 1))
                i = close
                head_start = i + 1
        i += 1
    return out


def file_lines(text):
    return len(text.splitlines())


def check(root):
    """Returns (offences, stale allowlist entries); an offence is (rel, line, name, lines)."""
    offences, seen = [], set()
    for d in DIRS:
        for dirpath, dirs, files in os.walk(os.path.join(root, d)):
            dirs.sort()
            for name in sorted(files):
                if not name.endswith(SOURCE_EXTS):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                found = []
                n = file_lines(text)
                if n > MAX_FILE_LINES:
                    found.append((rel, 0, FILE, n))
                for fn, line, lines in functions_of(text):
                    if lines > MAX_FUNCTION_LINES:
                        found.append((rel, line, fn, lines))
                for o in found:
                    key = (o[0], o[2])
                    if key in ALLOWED:
                        seen.add(key)
                    else:
                        offences.append(o)
    stale = sorted(set(ALLOWED) - seen)
    return offences, stale


def report(root):
    offences, stale = check(root)
    for rel, line, name, n in offences:
        if name == FILE:
            print(f"{rel}: {n} lines (max {MAX_FILE_LINES})")
        else:
            print(f"{rel}:{line}: function {name} is {n} lines (max {MAX_FUNCTION_LINES})")
    for rel, name in stale:
        what = "the file" if name == FILE else f"function {name}"
        print(f"{rel}: allowlisted {what} is within the limit now: delete its entry from "
              f"ALLOWED in scripts/check_sizes.py")
    if offences or stale:
        print(f"check_sizes: {len(offences)} offender(s), {len(stale)} stale allowlist "
              f"entr{'y' if len(stale) == 1 else 'ies'}")
        return 1
    print(f"check_sizes: ok ({len(ALLOWED)} allowlisted offenders)")
    return 0


def selftest():
    def body(n):
        """A function definition spanning exactly n lines, with braces in a string, a char and
        comments (which must not count) and a lambda (which must)."""
        inner = ['  auto g = [](int x) {', '    return x + 1;', '  };',
                 '  const char* s = "}}}{";  // }', "  char c = '}'; /* { */"]
        inner += ["  (void)g;"] * (n - 2 - len(inner))
        return "int f(int a) {\n" + "\n".join(inner) + "\n}\n"

    def tree(extra):
        root = tempfile.mkdtemp(prefix="check_sizes_")
        write(root, "src/core/small.h", "#pragma once\nint x();\n")
        # Every allowlisted offender present, so the clean tree has no stale entries.
        for (rel, name) in sorted(ALLOWED):
            path = os.path.join(root, rel)
            old = open(path).read() if os.path.exists(path) else ""
            if name == FILE:
                text = "\n" * (MAX_FILE_LINES + 1)
            else:
                text = body(MAX_FUNCTION_LINES + 1).replace("int f(", f"int {name.split('::')[-1]}(")
            write(root, rel, old + text)
        for rel, text in extra.items():
            write(root, rel, text)
        return root

    expect = Expectations()

    v, s = check(tree({}))
    expect("clean tree", (v, s), ([], []))
    # Limits are inclusive: 800 lines and 150-line functions pass, one more fails.
    v, s = check(tree({"src/kernels/ok.cu": "\n" * MAX_FILE_LINES,
                       "src/kernels/fn.cu": body(MAX_FUNCTION_LINES)}))
    expect("at the limits", v, [])
    v, _ = check(tree({"tools/big.cpp": "x\n" * (MAX_FILE_LINES + 1)}))
    expect("oversize file caught", v, [("tools/big.cpp", 0, FILE, MAX_FILE_LINES + 1)])
    v, _ = check(tree({"src/kernels/fn.cu": "// {\n" + body(MAX_FUNCTION_LINES + 1)}))
    expect("oversize function caught", v, [("src/kernels/fn.cu", 2, "f", MAX_FUNCTION_LINES + 1)])
    # Found in namespaces, as class members, as templates, after an initialiser table.
    nested = ("namespace a {\nnamespace {\nconst int kT[] = {1, 2};\nstruct S {\n  int v{0};\n"
              "  template <typename T = int>\n  " + body(MAX_FUNCTION_LINES + 1).replace("int f(", "T m(")
              + "};\n}  // namespace\n" + "S::S(int a) : v{a}, w(a) {\n" + "\n" * 160 + "}\n}\n")
    v, _ = check(tree({"src/planner/n.cpp": nested}))
    expect("nested functions caught", [(x[2], x[3]) for x in v],
           [("m", MAX_FUNCTION_LINES + 1), ("S::S", 162)])
    # Inside extern "C", and a member operator of an aligned struct.
    ext = ('extern "C" {\n' + body(MAX_FUNCTION_LINES + 1) + "}\nstruct alignas(16) A {\n  "
           + body(MAX_FUNCTION_LINES + 1).replace("int f(", "bool operator==(") + "};\n")
    v, _ = check(tree({"src/sync/ext.cuh": ext}))
    expect("extern C and operators caught", [(x[2], x[3]) for x in v],
           [("f", MAX_FUNCTION_LINES + 1), ("operator==", MAX_FUNCTION_LINES + 1)])
    # A raw string holding braces does not confuse the matcher.
    raw = 'const char* k = R"js({"a": {)js";\n' + body(MAX_FUNCTION_LINES + 1)
    v, _ = check(tree({"src/io/raw.cpp": raw}))
    expect("raw string skipped", [(x[2], x[3]) for x in v], [("f", MAX_FUNCTION_LINES + 1)])
    # Only .h .cuh .cpp .cu under src/ and tools/ are checked.
    v, _ = check(tree({"src/x.py": "\n" * 900, "tests/big_test.cu": "\n" * 900}))
    expect("other files ignored", v, [])
    # A stale allowlist entry (its offence gone) fails too: one planted for the test.
    planted = ("src/planner/stale.cpp", "gone")
    ALLOWED[planted] = "planted by the selftest"
    try:
        v, s = check(tree({"src/planner/stale.cpp": "int gone() {\n}\n"}))
    finally:
        del ALLOWED[planted]
    expect("stale entry caught", (v, s), ([], [planted]))
    # And the check of this repository's own tree runs (its result is the ctest check_sizes).
    check(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

    return expect.finish()


if __name__ == "__main__":
    sys.exit(main(__doc__, report, selftest))
