#!/usr/bin/env python3
"""Fails when a kernel of the built CUDA backend uses local memory (register spills or a stack frame).

Usage: check_cuda_spills.py LIBRARY_OR_OBJECT...

Reads `cuobjdump --dump-resource-usage` of every file named (the static library libbertperf_cuda.a holds every
kernel of a training step that this project compiles; cuBLASLt's and cuDNN's kernels are the libraries' own) and
checks, for every function of every architecture, that LOCAL (bytes of local memory per thread: spill stores and
loads go there) and STACK are 0. cuobjdump comes from PATH, the CUDA toolkit, or the pinned nvidia-cuda-cuobjdump
package of the project's virtual environment. Exit 0: no spills; 1: spills (listed); 2: bad input;
77: cuobjdump is not here (ctest reports the test as skipped, with the reason).
"""
import glob
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def find_cuobjdump():
    candidates = [os.environ.get("CUOBJDUMP", ""), shutil.which("cuobjdump") or ""]
    for cuda in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if cuda:
            candidates.append(os.path.join(cuda, "bin", "cuobjdump"))
    site_dirs = [p for p in sys.path if p.endswith("site-packages")]
    site_dirs += glob.glob(os.path.join(ROOT, ".venv", "lib", "python*", "site-packages"))
    for site in site_dirs:
        candidates += sorted(glob.glob(os.path.join(site, "nvidia", "*", "bin", "cuobjdump")))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


FUNCTION = re.compile(r"^\s*Function (\S+):\s*$")
USAGE = re.compile(r"\b(REG|STACK|SHARED|LOCAL):(\d+)")
ARCH = re.compile(r"^arch = (\S+)")


def parse(text):
    """Yields (arch, function, {REG, STACK, SHARED, LOCAL}) for every function listed."""
    arch, function = "?", None
    for line in text.splitlines():
        m = ARCH.match(line)
        if m:
            arch = m.group(1)
            continue
        m = FUNCTION.match(line)
        if m:
            function = m.group(1)
            continue
        if function:
            usage = dict((k, int(v)) for k, v in USAGE.findall(line))
            if usage:
                yield arch, function, usage
                function = None


def main(argv):
    if len(argv) < 2:
        print("usage: check_cuda_spills.py LIBRARY_OR_OBJECT...", file=sys.stderr)
        return 2
    tool = find_cuobjdump()
    if not tool:
        print("SKIPPED: cuobjdump is not here (install the pinned nvidia-cuda-cuobjdump of requirements.txt, "
              "or put the CUDA toolkit's on PATH)")
        return 77
    functions, bad = 0, []
    for path in argv[1:]:
        if not os.path.isfile(path):
            print(f"{path}: no such file", file=sys.stderr)
            return 2
        run = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{path}: cuobjdump failed: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.returncode}",
                  file=sys.stderr)
            return 2
        for arch, function, usage in parse(run.stdout):
            functions += 1
            if usage.get("LOCAL", 0) > 0 or usage.get("STACK", 0) > 0:
                bad.append(f"{arch} {function}: LOCAL {usage.get('LOCAL', 0)} bytes, STACK {usage.get('STACK', 0)} "
                           f"bytes, {usage.get('REG', 0)} registers")
    if functions == 0:
        print("no kernels found in " + " ".join(argv[1:]), file=sys.stderr)
        return 2
    for b in bad:
        print("local memory: " + b)
    print(f"{functions} kernel builds checked with {tool}: {len(bad)} use local memory")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
