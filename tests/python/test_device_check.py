"""scripts/device_check.sh, the GPU check, run here with every step's command stood in for
(DEVICE_CHECK_STANDIN: the script runs `STAND_IN STEP` in place of each step, with no bundle, build or GPU), so
that what the check does with its budget, its state and its steps' outputs is checked without a GPU:
 - the plan (--plan-only) lists every step with its limit and the running sum within the budget, the PyTorch peer
   last;
 - a step stopped by a limit the budget cut is "not run (budget)", never FAILED, and so is every step after it; the
   check exits 0 when nothing failed, and --resume runs only the steps not yet run;
 - a step that fails, or times out at its own limit, is FAILED and the check exits 1;
 - a sanitizer finding whose first frame is in a library's kernel is the library's; one in ours fails;
 - the benchmark runs its full timing only where the probe's paths line says the attention is cuDNN's, and the real
   bench-step prints that line, in the form the check reads, before its first timed repeat.
The stand-in prints what the real programs print (GoogleTest's lines, compute-sanitizer's summary and findings,
bench-step's JSON lines) and logs each step it is asked to run."""
import json
import os
import re
import subprocess

import pytest

from bertperf_paths import REPO, find_binary

SCRIPT = REPO / "scripts" / "device_check.sh"

STAND_IN = r"""#!/usr/bin/env bash
# Each step's stand-in: $1 is the step. STANDIN_SLOW names a step that sleeps 60 s; STANDIN_FAIL one that fails;
# STANDIN_ATTENTION is what the benchmark's paths line says; STANDIN_RACE/STANDIN_MEMCHECK say whose kernel has a finding.
echo "$1" >> "$STANDIN_LOG"
[ "$1" = "${STANDIN_SLOW:-}" ] && exec sleep 60
if [ "$1" = "${STANDIN_FAIL:-}" ]; then
  echo "[ RUN      ] Family.Case/cuda"; echo "[  FAILED  ] Family.Case/cuda"; exit 1
fi
case $1 in
  configure|build) echo "$1: done" ;;
  sanitizer_racecheck)
    echo "[       OK ] GpuStep.StepsRunForTheSanitizers/cuda"
    case ${STANDIN_RACE:-none} in
      library) echo "========= Error: Race reported between Write access at void cub::CUB_300000_SM_900::DeviceRadixSortOnesweepKernel<int>(int *)+0x1b0 in onesweep.cuh:120"
               echo "=========     and Read access at void cub::CUB_300000_SM_900::DeviceRadixSortOnesweepKernel<int>(int *)+0x1d0 in onesweep.cuh:130 [4 hazards]"
               echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; exit 1 ;;
      ours) echo "========= Error: Race reported between Write access at void bertperf::cuda::block_sum(float)+0x40 in cuda_common.cuh:70"
            echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; exit 1 ;;
      *) echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" ;;
    esac ;;
  sanitizer_memcheck)
    echo "[       OK ] GpuStep.StepsRunForTheSanitizers/cuda"
    if [ "${STANDIN_MEMCHECK:-}" = ours ]; then
      echo "========= Invalid __global__ read of size 4 bytes"
      echo "=========     at bertperf::cuda::(anonymous namespace)::layernorm_forward_kernel(const float *)+0x70 in layernorm.cu:88"
      echo "=========     by thread (3,0,0) in block (0,0,0)"
      echo "========= ERROR SUMMARY: 1 error"; exit 1
    fi
    echo "========= ERROR SUMMARY: 0 errors" ;;
  bench_probe|bench_bertperf|bench_pytorch)
    echo "cuda backend: attention of 16384 tokens in 96 sequences of up to 512, 16 heads of 64, dropout 0.1: ..."
    [ "$1" != bench_pytorch ] && echo "{\"bench\": \"bertperf_paths\", \"paths\": {\"attention\": \"${STANDIN_ATTENTION:-cudnn}\"}}"
    echo "{\"summary\": \"best\", \"seqs_per_s\": $([ "$1" = bench_pytorch ] && echo 500.0 || echo 800.0)}" ;;
  *) echo "[ RUN      ] $1.Case/cuda"; echo "[       OK ] $1.Case/cuda (1 ms)" ;;
esac
"""

STEPS = ["configure", "build", "conformance_attention", "conformance_linear", "conformance_layernorm",
         "conformance_embedding", "conformance_loss", "conformance_optimizer", "conformance_memory",
         "conformance_masks", "conformance_other", "step", "eval_async", "determinism", "conformance_kernel",
         "conformance_fp8", "sanitizer_memcheck", "sanitizer_racecheck", "bench_probe", "bench_bertperf", "bench_fp8",
         "bench_pytorch"]


@pytest.fixture
def check(tmp_path):
    stand_in = tmp_path / "stand_in.sh"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    out = tmp_path / "out"
    log = tmp_path / "steps.log"

    def run(*args, **env):
        log.write_text("")
        full_env = {k: v for k, v in os.environ.items() if k != "OUT"}
        full_env.update(DEVICE_CHECK_STANDIN=str(stand_in), STANDIN_LOG=str(log), **env)
        got = subprocess.run(["bash", str(SCRIPT), "--out", str(out), *args], capture_output=True, text=True,
                             env=full_env, timeout=120)
        table = (out / "device_check.md").read_text() if (out / "device_check.md").exists() else ""
        rows = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(r"^\| (\w+) \| ([^|]+) \| (.*) \|$",
                                                                              table, re.M)}
        return got, rows, log.read_text().split()
    return run


def test_the_plan_lists_every_step_with_its_limit_and_the_sum_within_the_budget():
    got = subprocess.run(["bash", str(SCRIPT), "--plan-only"], capture_output=True, text=True, timeout=30)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    listed = [m.group(1) for m in (re.match(r"^\s+\d+\s+(\w+)\s+(\d+) s", l) for l in lines) if m]
    assert listed[-1] == "bench_pytorch", "the PyTorch peer is not last"
    assert set(STEPS) <= set(listed)
    assert listed.index("build") < listed.index("conformance_attention") < listed.index("step") \
        < listed.index("determinism") < listed.index("sanitizer_racecheck") < listed.index("bench_bertperf")
    limits = {m.group(1): int(m.group(2)) for m in (re.match(r"^\s+\d+\s+(\w+)\s+(\d+) s\s+(\d+) s", l)
                                                     for l in lines) if m}
    total = re.search(r"required steps: (\d+) s of limits, within the budget of (\d+) s", got.stdout)
    assert total, got.stdout
    assert int(total.group(1)) == sum(limits.values()) <= int(total.group(2))
    assert not {"bench_fp8", "bench_pytorch", "conformance_cudnn_forced"} & set(limits), "optional steps in the sum"
    # A smaller budget says how far over it is, and what happens to the rest.
    small = subprocess.run(["bash", str(SCRIPT), "--plan-only", "--budget", "200"], capture_output=True, text=True)
    assert re.search(r"\d+ s over the budget of 200 s", small.stdout) and "--resume" in small.stdout


def test_a_step_the_budget_cuts_is_not_run_and_resume_runs_only_the_rest(check):
    # 28 s of budget: determinism starts with under its 30 s left (and over the 15 s a step needs to start, while the
    # steps before it take under 13 s), its limit cut, and is stopped by it.
    got, rows, ran = check("--budget", "28", STANDIN_SLOW="determinism")
    assert got.returncode == 0, got.stdout + got.stderr
    assert rows["determinism"][0] == "not run (budget)", rows["determinism"]
    assert "by the budget" in rows["determinism"][1]
    after = STEPS[STEPS.index("determinism") + 1:]
    for name in after:
        assert rows[name][0] == "not run (budget)", (name, rows[name])
    assert not set(after) & set(ran), "a step ran after the budget was spent"
    for name in STEPS[:STEPS.index("determinism")]:
        assert rows[name][0] == "passed", (name, rows[name])
    assert not re.search(r"-\d+ s", got.stdout), "a negative time left"

    got, rows, ran = check("--resume", "--budget", "60")
    assert got.returncode == 0, got.stdout + got.stderr
    assert ran == ["determinism", "conformance_kernel", "conformance_fp8", "sanitizer_memcheck", "sanitizer_racecheck",
                   "bench_probe", "bench_bertperf", "bench_fp8", "bench_pytorch"], ran
    for name in STEPS:
        assert rows[name][0] == "passed", (name, rows[name])
    assert "bertperf / PyTorch: 1.60x" in got.stdout


def test_a_failing_step_fails_the_check_and_a_later_step_still_runs(check):
    got, rows, ran = check(STANDIN_FAIL="conformance_loss")
    assert got.returncode == 1
    assert rows["conformance_loss"][0] == "FAILED" and "Family.Case/cuda" in rows["conformance_loss"][1]
    assert rows["conformance_optimizer"][0] == "passed" and "bench_pytorch" in ran
    # A resumed check keeps the failure (it ran) and runs nothing again.
    got, rows, ran = check("--resume")
    assert got.returncode == 1 and ran == [] and rows["conformance_loss"][0] == "FAILED"


def test_a_step_stopped_by_its_own_limit_is_failed(check):
    got, rows, _ = check(STANDIN_SLOW="conformance_memory")  # its limit of 10 s, not the budget
    assert got.returncode == 1
    assert rows["conformance_memory"] == ("FAILED", "timed out after 10 s; 0 passed before")


def test_sanitizer_findings_in_library_kernels_are_the_librarys(check):
    got, rows, _ = check(STANDIN_RACE="library")
    assert got.returncode == 0, got.stdout
    status, detail = rows["sanitizer_racecheck"]
    assert status == "passed (library findings)" and "cub::" in detail
    got, rows, _ = check(STANDIN_RACE="ours", STANDIN_MEMCHECK="ours")
    assert got.returncode == 1
    assert rows["sanitizer_racecheck"][0] == "FAILED" and "block_sum" in rows["sanitizer_racecheck"][1]
    assert rows["sanitizer_memcheck"][0] == "FAILED" and "layernorm_forward_kernel" in rows["sanitizer_memcheck"][1]


def test_the_benchmark_times_fully_only_on_cudnns_attention(check):
    got, rows, ran = check(STANDIN_ATTENTION="kernel")
    assert got.returncode == 0
    assert "bench_bertperf" not in ran
    assert rows["bench_bertperf"][0] == "not run" and "kernel" in rows["bench_bertperf"][1]
    assert "attention: kernel" in rows["bench_probe"][1]


def test_bad_options_get_one_line():
    for args, what in ((["--budget", "soon"], "budget"), (["--frobnicate"], "unknown option"), (["--out"], "--out")):
        got = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30)
        assert got.returncode == 2 and what in got.stderr and len(got.stderr.strip().splitlines()) == 1, got.stderr


def test_bench_step_prints_its_paths_line_before_timing():
    bertperf = find_binary("bertperf")
    if bertperf is None:
        pytest.skip("bertperf is not built")
    got = subprocess.run([str(bertperf), "bench-step", "--model", "mini", "--batch", "1", "--seq-len", "16",
                          "--threads", "1", "--warmup", "1", "--steps", "1", "--repeats", "1"],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    records = [json.loads(line) for line in got.stdout.splitlines() if line.startswith("{")]
    assert records[0]["bench"] == "bertperf_paths", records[0]
    assert records[0]["paths"] == {}, "the cpu backend has no choice of path"
    assert "repeat" in records[1] and records[-1]["summary"] == "best"
