"""What the tree checks (check_layers.py, check_sizes.py) share: writing a synthetic tree for a
selftest, collecting the selftest's expectations, and the command line (`selftest`, or
`--root DIR` to check a tree)."""
import argparse
import os
import sys


def write(root, rel, text):
    """Writes `text` to root/rel, creating its directories."""
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class Expectations:
    """A selftest's checks: each mismatch is kept, all are printed at the end."""

    def __init__(self):
        self.failures = []

    def __call__(self, name, got, want):
        if got != want:
            self.failures.append(f"{name}: got {got}, want {want}")

    def finish(self):
        for f in self.failures:
            print("FAIL", f)
        print("selftest:", "ok" if not self.failures else f"{len(self.failures)} failure(s)")
        return 1 if self.failures else 0


def main(doc, report, selftest):
    """`SCRIPT selftest` runs the selftest; `SCRIPT [--root DIR]` checks the tree (default: this
    repository). Returns the exit status."""
    if len(sys.argv) > 1 and sys.argv[1] == "selftest":
        return selftest()
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    return report(ap.parse_args().root)
