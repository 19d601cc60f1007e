#!/usr/bin/env python3
"""Cost of creating inodes in a directory: the file-system work a tunectl
trial does (trial directory, result file, ledger directory, ledger record),
without tunectl. Used to tell file-system cost from tunectl cost in
benches/dispatch.sh (see docs/benchmarks.md).

    benches/fs_inodes.py [DIR ...]      # default: $TMPDIR or /tmp, and /dev/shm

For each DIR, makes a fresh subdirectory, creates N (default 1000) directories
each holding one small file, times it, and removes everything.
"""
import os
import shutil
import sys
import tempfile
import time

N = int(os.environ.get("N", "1000"))


def bench(parent: str) -> float:
    root = tempfile.mkdtemp(prefix="tunectl-fs-inodes.", dir=parent)
    try:
        t = time.perf_counter()
        for i in range(N):
            d = os.path.join(root, f"k{i}")
            os.mkdir(d)
            with open(os.path.join(d, "a.json"), "w") as f:
                f.write("{}")
        return (time.perf_counter() - t) / (2 * N)
    finally:
        shutil.rmtree(root)


def main() -> None:
    dirs = sys.argv[1:] or [os.environ.get("TMPDIR", "/tmp"), "/dev/shm"]
    for d in dirs:
        if not os.path.isdir(d):
            print(f"{d}: not a directory, skipped")
            continue
        runs = [bench(d) * 1e6 for _ in range(3)]
        print(f"{d}: {min(runs):.0f}-{max(runs):.0f} us per inode created "
              f"({N} dirs + {N} files, 3 runs)")


if __name__ == "__main__":
    main()
