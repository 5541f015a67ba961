"""Side-by-side benchmark of one BERT training step: bertperf (C++, CPU) against PyTorch eager.

What it implements
------------------
For each shape (BERT-mini L4 H256 and BERT-base L12 H768, seq 128, 20 predictions per sequence,
vocab 30522, dropout 0.1, LAMB), runs `bertperf bench-step` and scripts/bench_pytorch_step.py with
the same batch and thread count, alternating the two so both see the same machine state, and keeps
each one's best repeat. Also runs OpenBLAS sgemm at the BERT-base GEMM shapes (the bertperf_bench
microbenchmark) so the step's achieved GFLOP/s can be read against plain sgemm on this machine.

With --backends cpu cpu-bf16, bertperf runs on each backend and each has its PyTorch peer: fp32 eager for "cpu",
eager under torch.autocast("cpu", dtype=torch.bfloat16) for "cpu-bf16" (its bf16 matmuls are oneDNN's). The table
then also gives cpu-bf16's speed-up over cpu.

Prints a Markdown table: sequences/s of each, the ratio, bertperf's GFLOP/s, activation arena and
peak resident memory; with --json, the raw records too.

Run from the repository root after scripts/build.sh and scripts/setup.sh --reference:
  .venv/bin/python scripts/bench_train_step.py --threads 2
  .venv/bin/python scripts/bench_train_step.py --shapes mini:32 base:8 base:32 --rounds 2
  .venv/bin/python scripts/bench_train_step.py --shapes mini:32 base:8 --backends cpu cpu-bf16 --rounds 3
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def best_record(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [r for r in records if r.get("summary") == "best"][0]


def sgemm_gflops(bench, threads):
    """Best OpenBLAS sgemm GFLOP/s over the BERT-base GEMM shapes of bertperf_bench."""
    if not os.path.exists(bench):
        return None
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([bench, "--benchmark_filter=BM_Sgemm", "--benchmark_format=json"], check=True,
                         capture_output=True, text=True, env=env).stdout
    rates = [b.get("GFLOP/s", 0) for b in json.loads(out)["benchmarks"] if "GFLOP/s" in b]
    return max(rates) if rates else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["mini:32", "base:8"], help="model:batch pairs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best of all is kept")
    ap.add_argument("--bertperf", default=os.path.join(ROOT, "build/bin/bertperf"))
    ap.add_argument("--python-ref", default=os.path.join(ROOT, ".venv-ref/bin/python"))
    ap.add_argument("--backends", nargs="+", default=["cpu"], choices=["cpu", "cpu-bf16"],
                    help="bertperf backends, each beside its PyTorch peer (cpu-bf16: autocast bf16)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    rows = []
    for shape in args.shapes:
        model, batch = shape.split(":")
        steps = "3" if model == "mini" else "2"
        cmds = {}
        for backend in args.backends:
            ours_cmd = [args.bertperf, "bench-step", "--model", model, "--batch", batch, "--threads",
                        str(args.threads), "--backend", backend, "--warmup", "1", "--steps", steps, "--repeats", "2"]
            peer_cmd = [args.python_ref, "scripts/bench_pytorch_step.py", "--model", model, "--batch", batch,
                        "--threads", str(args.threads), "--warmup", "1", "--steps", steps, "--repeats", "2",
                        "--autocast", "bf16" if backend == "cpu-bf16" else "off"]
            cmds[backend] = (ours_cmd, peer_cmd)
        best = {b: [None, None] for b in args.backends}
        # Alternating: every round runs each side of each backend once, so all see the same machine state.
        for _ in range(args.rounds):
            for backend, (ours_cmd, peer_cmd) in cmds.items():
                o, p = best_record(ours_cmd), best_record(peer_cmd)
                kept = best[backend]
                kept[0] = o if kept[0] is None or o["seqs_per_s"] > kept[0]["seqs_per_s"] else kept[0]
                kept[1] = p if kept[1] is None or p["seqs_per_s"] > kept[1]["seqs_per_s"] else kept[1]
                print(f"{shape} {backend}: bertperf {o['seqs_per_s']} seq/s, pytorch {p['seqs_per_s']} seq/s",
                      file=sys.stderr)
        for backend in args.backends:
            rows.append((model, int(batch), backend, best[backend][0], best[backend][1]))

    sgemm = sgemm_gflops(os.path.join(os.path.dirname(args.bertperf), "bertperf_bench"), args.threads)
    print(f"| model | batch | threads | backend | bertperf seq/s | PyTorch seq/s | ratio | vs cpu | bertperf GFLOP/s | "
          f"GEMM share | arena MiB | peak RSS MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    fp32 = {(m, b): o for m, b, backend, o, _ in rows if backend == "cpu"}
    for model, batch, backend, ours, peer in rows:
        base = fp32.get((model, batch))
        vs_cpu = f"{ours['seqs_per_s'] / base['seqs_per_s']:.2f}x" if base and backend != "cpu" else "-"
        print(f"| {model} | {batch} | {args.threads} | {backend} | {ours['seqs_per_s']:.2f} | {peer['seqs_per_s']:.2f} | "
              f"{ours['seqs_per_s'] / peer['seqs_per_s']:.2f}x | {vs_cpu} | {ours['gflops']:.1f} | "
              f"{ours.get('gemm_share', 0):.2f} | {ours['arena_mib']:.0f} | {ours['peak_rss_mib']:.0f} |")
    if sgemm:
        print(f"\nOpenBLAS sgemm at the BERT-base GEMM shapes, {args.threads} threads: {sgemm:.1f} GFLOP/s (best shape).")
    if args.json:
        print(json.dumps({"rows": rows, "sgemm_gflops": sgemm}))


if __name__ == "__main__":
    main()
