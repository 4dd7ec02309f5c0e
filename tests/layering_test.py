#!/usr/bin/env python3
"""The layer order of docs/DESIGN.md, checked on every #include of the sources (not tests/).

A file may include headers of its own layer and of the layers below it, never of one above (or of
a sibling at the top: examples, bench, release and tools do not include each other). Inside
distributed/, the sub-packages have their own order (DISTRIBUTED below). No file outside cuda/
includes a CUDA toolkit header, except the NCCL backend in distributed/backend.

Reads the files Bazel gives it as data (each package's `layering_srcs` filegroup); with
arguments, checks those paths instead (relative to the current directory), e.g.
`python3 tests/layering_test.py $(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')` from the root.
"""
import os
import re
import sys

# Lowest first: a layer may include its own and the earlier layers' headers. cuda registers its
# kernels into core's table and includes only core.
ORDER = ["core", "cuda", "autograd", "optim", "nn", "amp", "data", "profiler", "distributed",
         "models", "train"]
# Above everything, and not including each other.
TOP = ["examples", "bench", "release", "tools"]
# distributed/'s packages: what each may include besides itself. "" is distributed/ itself
# (the umbrella header distributed.h), which may include all of them.
DISTRIBUTED = {
    "store": set(),
    "backend": {"store"},
    "launch": {"store", "backend"},
    "data_parallel": {"store", "backend"},
    "debug": {"store", "backend"},
    "pipeline": {"store", "backend", "data_parallel"},
    "tensor_parallel": {"store", "backend"},
    "fsdp": {"store", "backend", "data_parallel"},
}
# The one place above cuda/ that includes CUDA headers: NCCL takes CUDA streams and pointers.
CUDA_HEADER_ALLOWED = {"distributed/backend/nccl_backend.cc", "distributed/backend/nccl_backend.h"}
CUDA_HEADER = re.compile(
    r"^(cuda|cuda_\w+|cudart\w*|cublas\w*|cublasLt|cudnn\w*|nccl\w*|curand\w*|cufft\w*|cusparse\w*|"
    r"cusolver\w*|nvrtc\w*|nvtx\w*|nvToolsExt\w*|nvJitLink\w*|cooperative_groups\w*|"
    r"(cuda|thrust|cub|nvtx3|cooperative_groups)/.*)(\.h|\.hpp|\.cuh)?$")

# Violations that exist today and are fixed by a move already agreed on (DESIGN.md). The test fails
# on any violation not listed here, and on any listed one that is gone (so the list only shrinks).
KNOWN_VIOLATIONS = set()

SOURCE = re.compile(r".*\.(h|hpp|cc|cpp|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(path):
    """(rank, name) of a path's layer, or None for files outside the layers (tests/, ...)."""
    top = path.split("/", 1)[0]
    if top in ORDER:
        return ORDER.index(top), top
    if top in TOP:
        return len(ORDER), top
    return None


def distributed_part(path):
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else ""


def check_file(path, text):
    """Yields (kind, message) for each bad include of one file."""
    own = layer_of(path)
    if own is None:
        yield "unknown", f"{path}: folder '{path.split('/')[0]}' is in no layer (add it to DESIGN.md's order and to this test)"
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        bracket, inc = m.groups()
        where = f"{path}:{lineno}"
        if bracket == "<":
            if CUDA_HEADER.match(inc) and own[1] != "cuda" and path not in CUDA_HEADER_ALLOWED:
                yield "cuda", (f"{where}: includes CUDA header <{inc}>; layer '{own[1]}' is above cuda/, "
                               f"and only cuda/ (and distributed/backend's NCCL backend) may include CUDA headers")
            continue
        target = layer_of(inc)
        if target is None:
            continue  # a file's own folder-less helper, third_party, or tests/ (never from sources)
        if own[1] == target[1]:
            if own[1] == "distributed":
                mine, theirs = distributed_part(path), distributed_part(inc)
                if mine and not theirs:
                    yield "layer", (f"{where}: includes \"{inc}\": distributed/{mine} includes the umbrella "
                                    f"distributed/, which includes every distributed package")
                elif theirs and mine and mine != theirs:
                    if mine not in DISTRIBUTED or theirs not in DISTRIBUTED:
                        unknown = mine if mine not in DISTRIBUTED else theirs
                        yield "unknown", (f"{where}: distributed/{unknown} is in no place of distributed/'s order "
                                          f"(add it to DESIGN.md and DISTRIBUTED in this test)")
                    elif theirs not in DISTRIBUTED[mine]:
                        yield "layer", (f"{where}: includes \"{inc}\": distributed/{mine} may not include "
                                        f"distributed/{theirs} (distributed/{mine} uses only "
                                        f"{', '.join(sorted(DISTRIBUTED[mine])) or 'core and the layers below'})")
            continue
        if target[0] > own[0] or (target[0] == own[0] == len(ORDER)):
            relation = "above it" if target[0] > own[0] else "beside it at the top"
            yield "layer", (f"{where}: includes \"{inc}\": layer '{own[1]}' includes layer '{target[1]}', "
                            f"which is {relation} in DESIGN.md's order")


def sources_from_runfiles():
    root = os.path.join(os.environ["TEST_SRCDIR"], os.environ.get("TEST_WORKSPACE", "__main__"))
    for dirpath, _, names in os.walk(root):
        for name in names:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if SOURCE.match(rel) and not rel.startswith(("tests/", "external/", "third_party/")):
                yield rel, full


def main(argv):
    if len(argv) > 1:
        files = [(p, p) for p in argv[1:] if SOURCE.match(p) and not p.startswith(("tests/", "third_party/"))]
    else:
        files = list(sources_from_runfiles())
    layers_seen = set()
    problems, known_seen = [], set()
    for rel, full in sorted(files):
        with open(full, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if layer_of(rel):
            layers_seen.add(layer_of(rel)[1])
        for kind, message in check_file(rel, text):
            inc = re.search(r'includes "([^"]+)"', message)
            key = (rel, inc.group(1)) if inc else None
            if kind == "layer" and key in KNOWN_VIOLATIONS:
                known_seen.add(key)
                continue
            problems.append(message)
    # Every layer that exists today must have reached the test (a package left out of tests/BUILD's
    # data would pass unchecked); models/ and train/ join when they exist.
    missing = [l for l in ORDER + ["examples", "bench"] if l not in layers_seen and l not in ("models", "train")]
    for l in missing:
        problems.append(f"no sources of layer '{l}' reached the test: is its layering_srcs filegroup in tests/BUILD?")
    print(f"layering_test: {len(files)} files in {len(layers_seen)} layers checked")
    if known_seen:
        print(f"known violations ({len(known_seen)}, moves to train/ and models/ in the library issue):")
        for rel, inc in sorted(known_seen):
            print(f"  {rel} includes \"{inc}\"")
    checked = {r for r, _ in files}
    for rel, inc in sorted(KNOWN_VIOLATIONS - known_seen):
        if len(argv) == 1 or rel in checked:
            problems.append(f"{rel} no longer includes \"{inc}\": remove it from KNOWN_VIOLATIONS in tests/layering_test.py")
    for p in problems:
        print("FAIL " + p)
    if problems:
        print(f"layering_test: {len(problems)} problem(s)")
        return 1
    print("layering_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
