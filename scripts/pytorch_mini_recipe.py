"""PyTorch reference convergence run for the `mini` benchmark (and any other train config).

What it implements
------------------
The same training recipe as our C++ trainer, in PyTorch eager fp32, so that the C++ convergence
curve (masked-LM accuracy against samples) can be compared with an independent one:
  - reads a train config (benchmarks/bert/<benchmark>/<system>.json) and the benchmark.json beside
    it: bert_config, data files, batch size, LAMB hyperparameters and schedule, eval cadence,
    eval sample count and target accuracy;
  - reads the fixed-length MLPerf HDF5 layout (input_ids, input_mask, segment_ids,
    masked_lm_positions, masked_lm_ids, next_sentence_labels) or the variable-length one (vlen
    rows, no input_mask), rebuilt to the padded form; a prediction slot is real where its position
    is non-zero, as in the reference loader;
  - builds BERT from random weights (truncated normal 0.02 as in the reference, zero biases,
    LayerNorm 1/0), tanh GELU, LayerNorm eps 1e-12, dropout from the config;
  - loss = MLM (sum(w * CE) / (sum(w) + 1e-5) over the gathered masked slots) + NSP mean CE;
  - LAMB of the reference (global-norm clip 1.0, bias correction, decoupled decay, exclusions,
    trust ratio), lr from the reference schedule (linear warmup from start_warmup_step, polynomial
    decay over train_steps);
  - evaluates masked-LM accuracy (weighted argmax == label, dropout off) on the first eval_samples
    of the eval file at the benchmark's cadence, and stops at the target or at max_samples.
Single process; the global batch is local_batch_size * grad_accum_steps * ranks, taken as one
batch here (the reference single-device rule: gradient of the whole-batch loss, then clip).

Output: JSON lines on stdout ({"event": "train", ...} every --log-every steps, {"event": "eval", ...}
at each eval point, and a final {"event": "stop", "status": "success"|"aborted", ...}), each
carrying its seed; progress per seed on stderr.

With --out, the runs are written as an RCP reference file (samples to converge and time to train
per seed) that `bertperf-check --rcp-reference FILE` judges a result set against.

Run (reference venv from requirements-reference.txt; the data paths come from the config):
  python scripts/pytorch_mini_recipe.py --config benchmarks/bert/mini/cpu_2c.json --seeds 1-10 \
      --out benchmarks/bert/mini/reference/pytorch_cpu_2c.json
  python scripts/pytorch_mini_recipe.py --config ... --max-steps 20 --threads 2   # smoke run
"""

import argparse
import glob
import json
import math
import os
import sys
import time

import h5py
import numpy as np
import torch
from transformers import BertConfig, BertForPreTraining

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_pytorch_step import Lamb  # noqa: E402  (the same LAMB as the step benchmark)

FIELDS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_labels")


def load_config(path):
    with open(path) as f:
        cfg = json.load(f)
    base = os.path.dirname(os.path.abspath(path))
    with open(os.path.join(base, "benchmark.json")) as f:
        bench = json.load(f)
    resolve = lambda p: os.path.normpath(os.path.join(base, os.path.expandvars(p)))
    files = sorted(f for pat in cfg["data"]["train_files"] for f in glob.glob(resolve(pat)))
    if not files:
        sys.exit(f"{path}: no train files match {cfg['data']['train_files']}")
    gbs = cfg["batch"]["local_batch_size"] * cfg["batch"].get("grad_accum_steps", 1) * cfg["batch"].get("ranks", 1)
    if "interval_samples" in cfg.get("eval", {}):
        interval = cfg["eval"]["interval_samples"]
    else:
        # The MLPerf cadence formula, as the C++ harness computes it.
        c = bench["eval_interval"]
        raw = c["scale"] * (c["per_global_batch_sample"] * gbs + c["offset"])
        interval = max(int(math.floor(raw / c["round_down_to"])) * c["round_down_to"], c["round_down_to"])
    return {
        "bert": cfg["bert_config"], "train_files": files, "eval_file": resolve(cfg["data"]["eval_file"]),
        "seq_len": cfg["data"]["seq_len"], "preds": cfg["data"]["max_predictions"], "gbs": gbs, "lamb": cfg["lamb"],
        "eval_batch": cfg["eval"]["batch_size"], "eval_interval": interval,
        "eval_samples": bench.get("eval_samples", 10000), "target": bench["target_accuracy"],
        "max_samples": cfg.get("max_samples", bench.get("max_samples", 0)) or cfg["lamb"]["train_steps"] * gbs,
    }


def read_shard(f, seq_len, preds, take):
    """One file's first `take` samples in the padded form; fixed-length or variable-length layout."""
    if h5py.check_vlen_dtype(f["input_ids"].dtype) is None:
        missing = [k for k in FIELDS if k not in f]
        if missing:
            sys.exit(f"{f.filename}: not the fixed-length layout (missing {missing})")
        if f["input_ids"].shape[1] != seq_len:
            sys.exit(f"{f.filename}: sequence length {f['input_ids'].shape[1]}, config says {seq_len}")
        return {k: f[k][:take].astype(np.int64) for k in FIELDS}
    # Variable length: tokens stop at the real length and only real prediction slots are stored;
    # rebuild input_mask and the zero-padded slots as the reference loader does.
    out = {"input_ids": np.zeros((take, seq_len), np.int64), "input_mask": np.zeros((take, seq_len), np.int64),
           "segment_ids": np.zeros((take, seq_len), np.int64),
           "masked_lm_positions": np.zeros((take, preds), np.int64), "masked_lm_ids": np.zeros((take, preds), np.int64),
           "next_sentence_labels": f["next_sentence_labels"][:take].astype(np.int64)}
    rows = {k: f[k][:take] for k in ("input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids")}
    for i in range(take):
        n, m = len(rows["input_ids"][i]), len(rows["masked_lm_positions"][i])
        if n > seq_len or m > preds:
            sys.exit(f"{f.filename}: sample {i} has {n} tokens / {m} predictions, config allows {seq_len} / {preds}")
        out["input_ids"][i, :n], out["segment_ids"][i, :n], out["input_mask"][i, :n] = \
            rows["input_ids"][i], rows["segment_ids"][i], 1
        out["masked_lm_positions"][i, :m], out["masked_lm_ids"][i, :m] = \
            rows["masked_lm_positions"][i], rows["masked_lm_ids"][i]
    return out


def read_samples(paths, seq_len, preds, limit=None):
    """Concatenates every file (up to `limit` samples) in the padded form, as int64 tensors."""
    parts = {k: [] for k in FIELDS}
    n = 0
    for p in paths:
        with h5py.File(p, "r") as f:
            count = f["next_sentence_labels"].shape[0]
            take = count if limit is None else min(limit - n, count)
            for k, v in read_shard(f, seq_len, preds, take).items():
                parts[k].append(v)
            n += take
        if limit is not None and n >= limit:
            break
    return {k: torch.from_numpy(np.concatenate(v)) for k, v in parts.items()}


def init_weights(model, std):
    # The reference: truncated normal (cut at 2 sigma) for kernels and tables, zero biases, LN 1/0.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                torch.nn.init.trunc_normal_(p, std=std, a=-2 * std, b=2 * std)


def learning_rate(step, h):
    """The reference schedule; step = optimizer steps taken so far (0 on the first update)."""
    T = h["train_steps"]
    lr = h["learning_rate"] * (1.0 - min(step, T) / T) ** h.get("poly_power", 1.0)
    if h.get("warmup_steps", 0):
        s = step - h.get("start_warmup_step", 0)
        if s < h["warmup_steps"]:
            lr = h["learning_rate"] * s / h["warmup_steps"]
    return lr


def forward(model, b):
    out = model.bert(input_ids=b["input_ids"], attention_mask=b["input_mask"], token_type_ids=b["segment_ids"])
    B, S, H = out.last_hidden_state.shape
    flat = (torch.arange(B)[:, None] * S + b["masked_lm_positions"]).reshape(-1)
    mlm_logits = model.cls.predictions(out.last_hidden_state.reshape(B * S, H).index_select(0, flat))
    nsp_logits = model.cls.seq_relationship(out.pooler_output)
    w = (b["masked_lm_positions"] != 0).reshape(-1).to(mlm_logits.dtype)
    return mlm_logits, nsp_logits, w


def loss_fn(model, b):
    mlm_logits, nsp_logits, w = forward(model, b)
    per_ex = torch.nn.functional.cross_entropy(mlm_logits, b["masked_lm_ids"].reshape(-1), reduction="none")
    mlm = (w * per_ex).sum() / (w.sum() + 1e-5)
    nsp = torch.nn.functional.cross_entropy(nsp_logits, b["next_sentence_labels"].reshape(-1))
    return mlm + nsp, mlm, nsp


@torch.no_grad()
def evaluate(model, data, batch):
    model.eval()
    correct = total = 0.0
    n = data["input_ids"].shape[0]
    for i in range(0, n, batch):
        b = {k: v[i:i + batch] for k, v in data.items()}
        mlm_logits, _, w = forward(model, b)
        hit = (mlm_logits.argmax(-1) == b["masked_lm_ids"].reshape(-1)).to(w.dtype)
        correct += float((w * hit).sum())
        total += float(w.sum())
    model.train()
    return correct / max(total, 1.0)


def run_seed(c, train, evald, seed, log_every=10, max_steps=0):
    """One run from random weights on data already in memory; returns its summary. An MLPerf
    run's clock would include reading the data (main reports how long that took), so
    time_to_train_s flatters this implementation, never ours."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    bc = dict(c["bert"])
    if bc.pop("hidden_act") != "gelu":
        sys.exit("hidden_act must be \"gelu\" (the reference's tanh GELU)")
    std = bc.pop("initializer_range")
    model = BertForPreTraining(BertConfig(**bc, hidden_act="gelu_new", layer_norm_eps=1e-12,
                                          initializer_range=std, attn_implementation="sdpa"))
    init_weights(model, std)
    model.train()
    opt = Lamb(list(model.named_parameters()), betas=(c["lamb"]["beta1"], c["lamb"]["beta2"]),
               eps=c["lamb"]["epsilon"], weight_decay=c["lamb"]["weight_decay"],
               max_grad_norm=c["lamb"]["max_grad_norm"])

    t0 = time.perf_counter()
    n_train, gbs = train["input_ids"].shape[0], c["gbs"]
    gen = torch.Generator().manual_seed(seed)
    order, cursor = torch.randperm(n_train, generator=gen), 0
    print(json.dumps({"event": "start", "seed": seed, "train_samples": n_train,
                      "eval_samples": evald["input_ids"].shape[0], "global_batch": gbs,
                      "eval_interval": c["eval_interval"], "target": c["target"],
                      "max_samples": c["max_samples"], "threads": torch.get_num_threads()}), flush=True)

    step, samples, next_eval = 0, 0, c["eval_interval"]
    status, acc, evals = "aborted", None, []
    while samples < c["max_samples"] and (not max_steps or step < max_steps):
        if cursor + gbs > n_train:  # a new epoch: reshuffle, drop the partial batch
            order, cursor = torch.randperm(n_train, generator=gen), 0
        idx = order[cursor:cursor + gbs]
        cursor += gbs
        b = {k: v[idx] for k, v in train.items()}
        loss, mlm, nsp = loss_fn(model, b)
        model.zero_grad(set_to_none=False)
        loss.backward()
        lr = learning_rate(step, c["lamb"])
        opt.step(lr)
        step += 1
        samples += gbs
        if step % log_every == 0:
            print(json.dumps({"event": "train", "seed": seed, "step": step, "samples": samples, "lr": lr,
                              "loss": round(loss.item(), 5), "mlm_loss": round(mlm.item(), 5),
                              "nsp_loss": round(nsp.item(), 5), "elapsed_s": round(time.perf_counter() - t0, 2)}),
                  flush=True)
        if samples >= next_eval:
            acc = evaluate(model, evald, c["eval_batch"])
            evals.append([samples, round(acc, 5)])
            print(json.dumps({"event": "eval", "seed": seed, "step": step, "samples": samples,
                              "mlm_accuracy": round(acc, 5), "elapsed_s": round(time.perf_counter() - t0, 2)}),
                  flush=True)
            next_eval += c["eval_interval"]
            if acc >= c["target"]:
                status = "success"
                break
    elapsed = time.perf_counter() - t0
    summary = {"seed": seed, "status": status, "samples_to_converge": samples if status == "success" else None,
               "time_to_train_s": round(elapsed, 2), "steps": step, "mlm_accuracy": acc, "evals": evals}
    print(json.dumps({"event": "stop", **summary}), flush=True)
    return summary


def parse_seeds(text):
    """"1-10" or "1,4,7" -> a list of seeds."""
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            return list(range(lo, hi + 1))
        return [int(x) for x in text.split(",")]
    except ValueError:
        sys.exit(f"--seeds: expected N, N-M or N,M,..., got {text!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="benchmarks/bert/<benchmark>/<system>.json")
    ap.add_argument("--seeds", default="1", help="one seed, a range 1-10 or a list 1,4,7 (default 1)")
    ap.add_argument("--out", help="write the runs as an RCP reference file (bertperf-check --rcp-reference)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: the config's, else PyTorch's)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (smoke runs)")
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()
    c = load_config(args.config)
    threads = args.threads or json.load(open(args.config)).get("backend", {}).get("threads", 0)
    if threads:
        torch.set_num_threads(threads)
    seeds = parse_seeds(args.seeds)
    t_load = time.perf_counter()
    train = read_samples(c["train_files"], c["seq_len"], c["preds"])
    evald = read_samples([c["eval_file"]], c["seq_len"], c["preds"], limit=c["eval_samples"])
    data_load_s = round(time.perf_counter() - t_load, 2)
    print(f"pytorch reference: {train['input_ids'].shape[0]} training samples read in {data_load_s} s",
          file=sys.stderr, flush=True)
    runs = []
    for i, seed in enumerate(seeds):
        print(f"pytorch reference: seed {seed} ({i + 1} of {len(seeds)})", file=sys.stderr, flush=True)
        runs.append(run_seed(c, train, evald, seed, args.log_every, args.max_steps))
        r = runs[-1]
        print(f"pytorch reference: seed {seed} {r['status']} at {r['steps'] * c['gbs']} samples, "
              f"{r['time_to_train_s']:.1f} s", file=sys.stderr, flush=True)
    if args.out:
        doc = {"description": "samples to converge of the PyTorch implementation of this recipe "
                              "(scripts/pytorch_mini_recipe.py), one run per seed",
               "config": os.path.relpath(os.path.abspath(args.config), os.path.dirname(os.path.abspath(args.out))),
               "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "threads": torch.get_num_threads(),
               "global_batch_size": c["gbs"], "target_accuracy": c["target"], "eval_interval": c["eval_interval"],
               "max_samples": c["max_samples"], "hyperparams": c["lamb"],
               "data_load_s_not_in_time_to_train": data_load_s, "runs": runs}
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.out)
        print(f"pytorch reference: wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
