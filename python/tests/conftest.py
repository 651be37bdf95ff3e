"""What the module's tests share: the CLI they compare against, and a random-weight checkpoint of
each tiny preset with its tokenizer (written once per test module by `megaops init-random`)."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("MEGAOPS_CLI", os.path.join(ROOT, "build", "megaops"))


@pytest.fixture(scope="module", params=["tiny-llama3", "tiny-qwen3"])
def ckpt(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param) / "ckpt"
    subprocess.run([CLI, "init-random", "--preset", request.param, "--out", str(out), "--seed",
                    "3"], check=True, capture_output=True)
    return str(out)
