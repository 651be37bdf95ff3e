#!/usr/bin/env python3
"""Fails when a file under src/ includes a header across a forbidden layer edge.

The layers (DESIGN.md): core <- io <- models -> graph; planner uses graph only;
runtime uses graph, kernels, sync and pipeline; kernels use sync and core only; reference (the
fp32 oracle) reads models, graph, io and pipeline, and is used by tests and `--cpu` only; pipeline
(the streaming driver) uses graph; tools/, tests/ and fuzz/ may
use everything. core is the base every layer may use. graph/ holds the model's description
(model_config.h: architecture, sizes, weights; tensor_parallel.h: its sharding) that graph/,
planner/, runtime/ and reference/ all read; models/ reads it from config.json and checkpoints.
A file's layer is its directory under src/; an include's layer is the first component of its
quoted path (`#include "kernels/matmul.cuh"`); includes without a directory are the file's own
layer.

Edges that break the rules today and can only go with changes to files other work owns are listed
in ALLOWED_BACK_EDGES, each with the reason. The check fails on a forbidden include that is not
listed, and on a listed one that no longer exists (delete its entry: the list only shrinks).

  python3 scripts/check_layers.py [--root DIR]     # check the tree (default: this repository)
  python3 scripts/check_layers.py selftest         # the checker catches a planted bad include
"""
import os
import re
import sys
import tempfile

from tree_check import Expectations, main, write

# Layer -> the layers its files may include (besides its own).
RULES = {
    "core": set(),
    "sync": {"core"},
    "io": {"core"},
    "graph": {"core"},
    "models": {"io", "graph", "core"},
    "planner": {"graph", "core"},
    "kernels": {"sync", "core"},
    # The runtime implements two interfaces of the layers above it, on the GPU: the engine's
    # ModelRunner (engine/model_runner.h, a header of plain types), so that the engine reaches the
    # GPU only through it, and the streaming driver's stage interface (pipeline/stream.h), as it
    # implements the executor interface.
    "runtime": {"graph", "kernels", "sync", "core", "engine", "pipeline"},
    # The fp32 oracle of the whole model reads checkpoints and configs like any user of them, and
    # the model's description (graph/model_config.h, graph/tensor_parallel.h); its pipeline stages
    # implement the streaming driver's stage interface (pipeline/stream.h).
    "reference": {"models", "graph", "io", "pipeline", "core"},
    # The serving engine (requests, scheduler, KV block manager, streamed text) sits above the
    # model's description, the text front end and the fp32 oracle (its CPU runner); the GPU
    # reaches it only through the ModelRunner interface (engine/model_runner.h), so it builds and
    # is tested without CUDA.
    "engine": {"reference", "models", "graph", "io", "core"},
    # The streaming driver: a pipeline's stages joined by chunk buffers under its schedule
    # (graph/pipeline.h), behind a stage interface the CPU oracle and the GPU runtime implement.
    "pipeline": {"graph", "core"},
    # The CUDA build's side of the engine: the GPU runner factory over the runtime's executors
    # (engine/gpu_runner.h declares it), kept out of engine/ so that layer never sees CUDA.
    "engine_cuda": {"engine", "runtime", "reference", "models", "graph", "io", "core"},
    # The HTTP front end (the OpenAI API, cpp-httplib) over the engine's thread-safe queue.
    "serve": {"engine", "models", "io", "graph", "core"},
}

# (file, included header) -> why the edge is still there. Remove an entry with the edge.
ALLOWED_BACK_EDGES = {}

SOURCE_EXTS = (".h", ".hpp", ".cuh", ".cpp", ".cc", ".cu")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def includes_of(path):
    """The quoted includes of a file, with their line numbers."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = []
    for m in INCLUDE_RE.finditer(text):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def check(root):
    """Returns (violations, stale allowlist entries) for the tree at `root`."""
    src = os.path.join(root, "src")
    violations, seen_allowed = [], set()
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(SOURCE_EXTS):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            layer = rel.split("/")[1]
            if layer not in RULES:
                violations.append((rel, 0, "", f"src/{layer}/ is not a known layer (add it to RULES)"))
                continue
            for line, inc in includes_of(path):
                if "/" not in inc:
                    continue  # the file's own directory
                target = inc.split("/")[0]
                if target == layer or target in RULES[layer]:
                    continue
                if target not in RULES:
                    continue  # not one of ours (a third-party header with a directory)
                key = (rel, inc)
                if key in ALLOWED_BACK_EDGES:
                    seen_allowed.add(key)
                    continue
                allowed = ", ".join(sorted(RULES[layer])) or "nothing"
                violations.append((rel, line, inc,
                                   f"{layer} may include {allowed} (not {target})"))
    stale = sorted(set(ALLOWED_BACK_EDGES) - seen_allowed)
    return violations, stale


def report(root):
    violations, stale = check(root)
    for rel, line, inc, why in violations:
        print(f"{rel}:{line}: forbidden include \"{inc}\": {why}")
    for rel, inc in stale:
        print(f"{rel}: allowlisted include \"{inc}\" is gone: delete its entry from "
              f"ALLOWED_BACK_EDGES in scripts/check_layers.py")
    if violations or stale:
        print(f"check_layers: {len(violations)} forbidden include(s), {len(stale)} stale "
              f"allowlist entr{'y' if len(stale) == 1 else 'ies'}")
        return 1
    print(f"check_layers: ok ({len(ALLOWED_BACK_EDGES)} allowlisted back edges)")
    return 0


def selftest():
    def tree(extra):
        root = tempfile.mkdtemp(prefix="check_layers_")
        write(root, "src/core/error.h", "#pragma once\n#include <string>\n")
        write(root, "src/sync/atomics.cuh", '#include "core/error.h"\n')
        write(root, "src/kernels/rmsnorm.cu", '#include "rmsnorm.cuh"\n#include "sync/atomics.cuh"\n')
        write(root, "src/models/model_config.h", '#include "io/text_file.h"\n#include "graph/op_graph.h"\n')
        # Every allowlisted edge present, so the clean tree has no stale entries.
        allowed = {}
        for rel, inc in sorted(ALLOWED_BACK_EDGES):
            allowed[rel] = allowed.get(rel, "") + f'#include "{inc}"\n'
        for rel, text in allowed.items():
            write(root, rel, text)
        for rel, text in extra.items():
            write(root, rel, text)
        return root

    expect = Expectations()

    v, s = check(tree({}))
    expect("clean tree", (len(v), len(s)), (0, 0))
    # A planted bad include: kernels -> runtime (the edge matmul.cuh had).
    v, s = check(tree({"src/kernels/matmul.cuh": '#include <cstdint>\n  #  include "runtime/device_memory.h"\n'}))
    expect("kernels -> runtime caught", [(x[0], x[1], x[2]) for x in v],
           [("src/kernels/matmul.cuh", 2, "runtime/device_memory.h")])
    # Every rule of the issue, one forbidden edge each.
    for rel, inc in [("src/io/config_json.cpp", "models/model_config.h"),
                     ("src/planner/planner.h", "kernels/matmul_dispatch.h"),
                     ("src/runtime/step.cu", "reference/model.h"),
                     ("src/graph/op_graph.cpp", "planner/planner.h"),
                     ("src/core/context.h", "io/safetensors.h"),
                     ("src/kernels/attention.cu", "graph/op_graph.h")]:
        v, _ = check(tree({rel: f'#include "{inc}"\n'}))
        expect(f"{rel} -> {inc} caught", [(x[0], x[2]) for x in v], [(rel, inc)])
    # A new layer directory must be placed in the rules.
    v, _ = check(tree({"src/newlayer/thing.cpp": '#include "core/error.h"\n'}))
    expect("unknown layer caught", len(v), 1)
    # A stale allowlist entry (its edge removed) fails too: one planted for the test.
    planted = ("src/graph/op_graph.h", "models/model_config.h")
    ALLOWED_BACK_EDGES[planted] = "planted by the selftest"
    try:
        v, s = check(tree({"src/graph/op_graph.h": '#include "graph/model_config.h"\n'}))
    finally:
        del ALLOWED_BACK_EDGES[planted]
    expect("stale entry caught", (len(v), s), (0, [planted]))
    # What may be included: tools and tests use everything, the oracle reads models and graph.
    v, s = check(tree({"src/reference/model.cpp": '#include "models/checkpoint.h"\n',
                       "src/reference/model.h": '#include "graph/model_config.h"\n',
                       "tools/cmd_generate.cpp": '#include "reference/model.h"\n',
                       "tests/runtime/x_test.cu": '#include "reference/ops.h"\n'}))
    expect("allowed edges pass", (len(v), len(s)), (0, 0))
    # And the check of this repository's own tree runs (its result is the ctest check_layers).
    check(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

    return expect.finish()


if __name__ == "__main__":
    sys.exit(main(__doc__, report, selftest))
