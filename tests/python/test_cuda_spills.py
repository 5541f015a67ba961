"""scripts/check_cuda_spills.py (the ctest cuda_kernels_use_no_local_memory runs it on the built CUDA backend) tells
a kernel with local memory from one without: two small kernels compiled here with nvcc, checked with cuobjdump."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bertperf_paths import REPO

sys.path.insert(0, str(REPO / "scripts"))
import check_cuda_spills  # noqa: E402

CLEAN = r"""
__global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
"""

# An array indexed by a runtime value cannot live in registers: it goes to local memory.
LOCAL = r"""
__global__ void lookup(float* out, const int* index, int n) {
  float table[64];
  for (int k = 0; k < 64; ++k) table[k] = out[k] * k;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = table[index[i] & 63];
}
"""


def compile_object(tmp_path, name, source):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    src = tmp_path / f"{name}.cu"
    src.write_text(source)
    obj = tmp_path / f"{name}.o"
    subprocess.run([nvcc, "-O3", "-arch=sm_80", "-c", str(src), "-o", str(obj)], check=True, capture_output=True)
    return obj


@pytest.fixture(scope="module")
def tools():
    if not (shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists()):
        pytest.skip("nvcc is not here")
    if not check_cuda_spills.find_cuobjdump():
        pytest.skip("cuobjdump is not here (the pinned nvidia-cuda-cuobjdump of requirements.txt installs it)")


@pytest.fixture(scope="module")
def objects(tools, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spills")
    return {"clean": compile_object(tmp, "clean", CLEAN), "both": compile_object(tmp, "both", CLEAN + LOCAL)}


def test_a_kernel_without_local_memory_passes(objects, capsys):
    assert check_cuda_spills.main(["check", str(objects["clean"])]) == 0
    assert "1 kernel builds checked" in capsys.readouterr().out


def test_only_the_kernel_with_local_memory_fails_and_is_named(objects, capsys):
    assert check_cuda_spills.main(["check", str(objects["both"])]) == 1
    out = capsys.readouterr().out
    flagged = [line for line in out.splitlines() if line.startswith("local memory:")]
    assert len(flagged) == 1 and "lookup" in flagged[0] and "axpy" not in flagged[0], out
    assert "2 kernel builds checked" in out


def test_a_missing_file_is_bad_input(tools, tmp_path):
    assert check_cuda_spills.main(["check", str(tmp_path / "absent.a")]) == 2
