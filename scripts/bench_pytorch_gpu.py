"""PyTorch peer of `bertperf bench-step --packed --backend cuda`: BERT-large training at MLPerf phase-2 shapes on
one GPU, as a well-tuned PyTorch user would write it.

What it times
-------------
One training step (forward with dropout 0.1, backward, optimizer) of transformers' BertForPreTraining, BERT-large
(L24 H1024 A16 I4096, vocab 30522, tanh GELU, LayerNorm eps 1e-12), in bf16 autocast with PyTorch's SDPA
attention, torch.compile, and the fused AdamW (torch has no LAMB; a fused Adam is the same memory traffic).
The batch is `--batch` packed rows of 512 tokens built exactly as bertperf's (cmd_bench_step.cpp, kPhase2Rows):
rows cycle through the packings [508], [300, 208], [380, 128], [200, 160, 148], so 2 sequences of 254 real tokens
and 76 predictions per row on average, the published aggregates of the MLPerf packed data. Attention is kept
within each sequence by a block-diagonal mask (SDPA's masked kernel), positions restart per sequence, the MLM head
runs on the gathered masked positions only and NSP on each sequence's [CLS] token (the MLPerf loss).

Output: one JSON line per timed repeat, then a summary line with the best; seqs_per_s counts sequences (MLPerf
samples):
  {"bench": "pytorch_gpu_step", "rows": 32, "sequences": 64, "step_s": ..., "seqs_per_s": ..., "summary": "best"}

Run on the GPU machine (scripts/device_check.sh does): python3 scripts/bench_pytorch_gpu.py --batch 32
"""

import argparse
import json
import random
import time

PHASE2_ROWS = [[508], [300, 208], [380, 128], [200, 160, 148]]
S = 512


def phase2_predictions(length):
    return min(76, int(0.15 * length + 0.5))


def packed_batch(torch, rows, vocab, seed, device):
    """The packed rows, their block-diagonal mask, and the gathered MLM/NSP targets."""
    rng = random.Random(seed)
    ids = torch.zeros(rows, S, dtype=torch.long)
    types = torch.zeros(rows, S, dtype=torch.long)
    positions = torch.zeros(rows, S, dtype=torch.long)
    mask = torch.zeros(rows, 1, S, S, dtype=torch.bool)
    mlm_rows, mlm_cols, mlm_labels, cls_rows, cls_cols, nsp_labels = [], [], [], [], [], []
    for r in range(rows):
        at = 0
        for length in PHASE2_ROWS[r % len(PHASE2_ROWS)]:
            ids[r, at:at + length] = torch.tensor([5 + rng.randrange(vocab - 5) for _ in range(length)])
            types[r, at + length // 2:at + length] = 1
            positions[r, at:at + length] = torch.arange(length)
            mask[r, 0, at:at + length, at:at + length] = True
            for p in sorted(rng.sample(range(1, length), phase2_predictions(length))):
                mlm_rows.append(r)
                mlm_cols.append(at + p)
                mlm_labels.append(5 + rng.randrange(vocab - 5))
            cls_rows.append(r)
            cls_cols.append(at)
            nsp_labels.append(rng.randrange(2))
            at += length
        for t in range(at, S):  # padding attends to itself only, so no row of the mask is empty
            mask[r, 0, t, t] = True
    t = lambda x: torch.tensor(x, dtype=torch.long, device=device)
    return dict(input_ids=ids.to(device), token_type_ids=types.to(device), position_ids=positions.to(device),
                attention_mask=mask.to(device), mlm_rows=t(mlm_rows), mlm_cols=t(mlm_cols), mlm_labels=t(mlm_labels),
                cls_rows=t(cls_rows), cls_cols=t(cls_cols), nsp_labels=t(nsp_labels))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32, help="packed rows of 512 tokens per step")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (torch.compile compiles here)")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-compile", action="store_true", help="eager mode (for comparison)")
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F
    from transformers import BertConfig, BertForPreTraining

    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    config = BertConfig(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                        intermediate_size=4096, hidden_act="gelu_new", layer_norm_eps=1e-12,
                        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, max_position_embeddings=512)
    config._attn_implementation = "sdpa"
    model = BertForPreTraining(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    batches = [packed_batch(torch, args.batch, config.vocab_size, seed, device) for seed in (1, 2)]
    sequences = int(batches[0]["cls_rows"].numel())

    def loss_of(b):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            hidden = model.bert(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                                position_ids=b["position_ids"], attention_mask=b["attention_mask"]).last_hidden_state
            masked = hidden[b["mlm_rows"], b["mlm_cols"]]
            scores = model.cls.predictions(masked)
            cls = hidden[b["cls_rows"], b["cls_cols"]]
            pooled = torch.tanh(model.bert.pooler.dense(cls))
            nsp = model.cls.seq_relationship(pooled)
            return (F.cross_entropy(scores.float(), b["mlm_labels"]) + F.cross_entropy(nsp.float(), b["nsp_labels"]))

    compiled = loss_of if args.no_compile else torch.compile(loss_of)

    def step(i):
        optimizer.zero_grad(set_to_none=True)
        loss = compiled(batches[i % 2])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()

    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    base = {"bench": "pytorch_gpu_step", "model": "large", "rows": args.batch, "sequences": sequences,
            "seq_len": S, "compiled": not args.no_compile, "device": torch.cuda.get_device_name(),
            "torch": torch.__version__}
    best = float("inf")
    for r in range(args.repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(args.steps):
            step(i)
        stop.record()
        torch.cuda.synchronize()
        dt = start.elapsed_time(stop) / 1000 / args.steps
        best = min(best, dt)
        print(json.dumps({**base, "repeat": r, "step_s": round(dt, 5), "seqs_per_s": round(sequences / dt, 3)}),
              flush=True)
    print(json.dumps({**base, "summary": "best", "step_s": round(best, 5), "seqs_per_s": round(sequences / best, 3)}),
          flush=True)


if __name__ == "__main__":
    main()
