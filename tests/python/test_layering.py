"""The layers of implementations/ (backends/backend.h lists them): no file includes a layer above its own, and
only backends/cpu knows OpenBLAS and OpenMP, only backends/cuda knows CUDA and its libraries
(NCCL and the CUDA runtime it needs live in comm/)."""
import re
from pathlib import Path

from bertperf_paths import REPO

SOURCES = REPO / "implementations"

# Lower number = lower layer. A file may include its own layer and any lower one.
LAYERS = {
    "core": 0,
    "backends": 1,
    "mllog": 1,
    "data": 2,
    "model": 3,
    "optim": 4,
    "comm": 4,
    "harness": 5,
    "perf": 6,
    "cli": 7,
}

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
CPU_ONLY = re.compile(r"^(cblas\.h|omp\.h|openblas.*)$")
CUDA_ONLY = re.compile(r"^(cuda.*\.h|cublas.*\.h|cudnn.*\.h|cudnn_frontend.*|nccl\.h|cub/.*|cuda/.*)$")


def sources():
    return sorted(p for p in SOURCES.rglob("*") if p.suffix in {".h", ".cpp", ".cu", ".cuh"})


def layer_of(relative: Path) -> str:
    return relative.parts[0]


def test_every_folder_has_a_layer():
    folders = {layer_of(p.relative_to(SOURCES)) for p in sources()}
    assert folders <= set(LAYERS), f"folders without a layer: {sorted(folders - set(LAYERS))}"


def test_no_file_includes_a_layer_above_its_own():
    upward = []
    for path in sources():
        rel = path.relative_to(SOURCES)
        mine = LAYERS[layer_of(rel)]
        for header in INCLUDE.findall(path.read_text(errors="replace")):
            top = header.split("/")[0]
            if top in LAYERS and LAYERS[top] > mine:
                upward.append(f"{rel} includes {header}")
    assert not upward, "upward includes:\n" + "\n".join(upward)


def test_only_the_cpu_backend_knows_openblas_and_openmp():
    leaks = []
    for path in sources():
        rel = path.relative_to(SOURCES)
        text = path.read_text(errors="replace")
        if rel.parts[:2] == ("backends", "cpu"):
            continue
        leaks += [f"{rel} includes {h}" for h in INCLUDE.findall(text) if CPU_ONLY.match(h)]
        if re.search(r"^\s*#\s*pragma\s+omp\b", text, re.M):
            leaks.append(f"{rel} uses an OpenMP pragma")
    assert not leaks, "\n".join(leaks)


def test_only_the_cuda_backend_knows_cuda():
    leaks = []
    for path in sources():
        rel = path.relative_to(SOURCES)
        if rel.parts[:2] == ("backends", "cuda"):
            continue
        # NCCL's CUDA side lives in comm/ (nccl_comm.cpp): the CUDA runtime and NCCL, nothing else of CUDA.
        allowed = re.compile(r"^(cuda_runtime\.h|nccl\.h)$") if rel.parts[0] == "comm" else None
        leaks += [f"{rel} includes {h}" for h in INCLUDE.findall(path.read_text(errors="replace"))
                  if CUDA_ONLY.match(h) and not (allowed and allowed.match(h))]
    assert not leaks, "\n".join(leaks)
