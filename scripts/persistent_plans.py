#!/usr/bin/env python3
"""Writes the plans the persistent-region benchmark compares (scripts/gpu_run.sh persistent): the
PDL chain (batch 1's default), the chain with the whole step but step_advance as one persistent
region, with one persistent region per layer, and with each layer's MLP half persistent.

    scripts/persistent_plans.py OUT_DIR LAYERS [--stages N] [--ctas N] [--model PRESET]

`selftest` checks the plans' shapes without writing files."""
import json
import os
import sys


def plans(layers, stages=0, model="", ctas=0):
    def plan(regions):
        d = {"backend": "pdl_chain", "overlap_streams": 1, "persistent_stages": stages,
             "persistent_ctas_per_sm": ctas}
        if regions:
            d["regions"] = [{"first_op": op, "backend": b} for op, b in regions]
        return {"format": "megaops-plan", "version": 1, "model": model, "batch": 1, "decode": d}

    per_layer = [("embedding", "pdl_chain")]
    mlp = [("embedding", "pdl_chain")]
    for l in range(layers):
        per_layer.append((f"layer {l} input_layernorm", "persistent"))
        mlp.append((f"layer {l} post_attention_layernorm", "persistent"))
        if l + 1 < layers:
            mlp.append((f"layer {l + 1} input_layernorm", "pdl_chain"))
    mlp.append(("final_norm", "pdl_chain"))
    return {
        "chain": plan([]),
        "whole": plan([("embedding", "persistent")]),
        "layers": plan(per_layer),
        "mlp": plan(mlp),
    }


def main(argv):
    if argv[1:] == ["selftest"]:
        p = plans(2)
        assert p["whole"]["decode"]["regions"] == [{"first_op": "embedding", "backend": "persistent"}]
        assert [r["first_op"] for r in p["layers"]["decode"]["regions"]] == [
            "embedding", "layer 0 input_layernorm", "layer 1 input_layernorm"]
        assert [r["backend"] for r in p["mlp"]["decode"]["regions"]] == [
            "pdl_chain", "persistent", "pdl_chain", "persistent", "pdl_chain"]
        print("persistent_plans selftest: ok")
        return 0
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, layers = argv[1], int(argv[2])
    stages = int(argv[argv.index("--stages") + 1]) if "--stages" in argv else 0
    model = argv[argv.index("--model") + 1] if "--model" in argv else ""
    ctas = int(argv[argv.index("--ctas") + 1]) if "--ctas" in argv else 0
    os.makedirs(out, exist_ok=True)
    for name, p in plans(layers, stages, model, ctas).items():
        with open(os.path.join(out, f"{name}.json"), "w") as f:
            json.dump(p, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
