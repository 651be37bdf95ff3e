"""The real `megaops serve` on the CPU oracle for the server's tests: a random-weight tiny-llama3
checkpoint with its tokenizer (written once by `megaops init-random`), a server on a free port
started per module and stopped with SIGTERM (which must exit 0), and the official openai client
pointed at it."""
import os
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("MEGAOPS_CLI", os.path.join(ROOT, "build", "megaops"))


@pytest.fixture(scope="session")
def ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("serve") / "tiny"
    subprocess.run([CLI, "init-random", "--preset", "tiny-llama3", "--out", str(out), "--seed",
                    "3"], check=True, capture_output=True)
    return str(out)


@pytest.fixture(scope="session")
def slow_ckpt(ckpt, tmp_path_factory):
    """tiny-llama3 made about ten times slower a token (wider, deeper), so a request runs long
    enough to be caught mid-way by a signal."""
    import json
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    cfg.update(hidden_size=256, intermediate_size=768, num_hidden_layers=4, head_dim=64)
    d = tmp_path_factory.mktemp("slow")
    (d / "config.json").write_text(json.dumps(cfg))
    out = d / "slow"
    subprocess.run([CLI, "init-random", "--config", str(d / "config.json"), "--out", str(out)],
                   check=True, capture_output=True)
    return str(out)


class Server:
    """A `megaops serve` process; .url is its base URL, .log what it wrote to stderr."""

    def __init__(self, ckpt, *args):
        self.proc = subprocess.Popen(
            [CLI, "serve", "--model", ckpt, "--cpu", "--port", "0", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            if "listening on http://" in line:
                self.url = line.split("listening on ")[1].strip()
                return
        self.proc.kill()
        raise RuntimeError("megaops serve did not start: " + "".join(self.log))

    def stop(self, timeout=60):
        """SIGTERM; returns the exit status and the rest of stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rest = self.proc.communicate(timeout=timeout)[1]
        self.log.append(rest)
        return self.proc.returncode


@pytest.fixture(scope="module")
def server(ckpt):
    s = Server(ckpt, "--max-batch", "8", "--max-context", "1024", "--kv-blocks", "128",
               "--max-step-tokens", "64")
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)
