"""PyTorch peer of our C++ training-step benchmark: one BERT pretraining step, eager mode.

What it implements
------------------
forward + backward + LAMB for BERT pretraining in fp32 on the CPU (or a CUDA device if asked),
with dropout 0.1 on, exactly the step our C++ trainer times:
  - transformers' BertForPreTraining (tanh GELU "gelu_new", LayerNorm eps 1e-12), fed a random
    batch of full-length sequences of seq_len tokens;
  - the MLPerf loss: the MLM head applied only at the gathered masked positions
    (max_predictions slots per sequence), sum(w * CE) / (sum(w) + 1e-5), plus NSP mean CE;
  - LAMB from the reference formulas (global-norm clip to 1.0, bias-corrected moments, decoupled
    weight decay 0.01, LayerNorm/bias exclusions, trust ratio), written with PyTorch's multi-tensor
    foreach ops so the optimizer is not a Python-loop bottleneck.

With --autocast bf16 the forward and the loss run under torch.autocast("cpu", dtype=torch.bfloat16) (bf16
matmuls through oneDNN, fp32 master weights, gradients and LAMB): the peer of bertperf's cpu-bf16 backend.

Shapes: --model mini (L4 H256 A4 I1024), base (L12 H768 A12 I3072), large (L24 H1024 A16 I4096),
vocab 30522, --seq-len 128 (default) with 20 predictions per sequence (76 at seq 512).

Output: one JSON line per timed repeat, then a summary line with the best:
  {"bench": "pytorch_step", "model": "mini", "batch": 32, "seq_len": 128, "threads": 2,
   "step_s": ..., "seqs_per_s": ..., "cpu_s_per_step": ..., "loadavg_1m": ..., "repeat": k}
On a shared machine, run it several times and take the best; cpu_s_per_step and loadavg_1m show
how contended a repeat was.

Run (reference venv from requirements-reference.txt):
  python scripts/bench_pytorch_step.py --model mini --batch 32 --threads 2
  python scripts/bench_pytorch_step.py --model base --batch 8 --threads 2 --warmup 1 --steps 2
"""

import argparse
import json
import math
import os
import time

import torch
from transformers import BertConfig, BertForPreTraining

SHAPES = {
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
    "large": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, intermediate_size=4096),
}


def lamb_excluded(name):
    return any(s in name for s in ("LayerNorm", "layer_norm", "bias"))


class Lamb:
    """The reference LAMB update (bert-reference section 4.1) on lists of tensors."""

    def __init__(self, named_params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, max_grad_norm=1.0):
        self.lr, self.b1, self.b2, self.eps, self.wd, self.clip = lr, betas[0], betas[1], eps, weight_decay, max_grad_norm
        # Split once into decayed/adapted and excluded tensors; HF names use "LayerNorm.weight" and
        # ".bias" so the reference's substring rule applies to them unchanged.
        self.adapt = [p for n, p in named_params if not lamb_excluded(n)]
        self.plain = [p for n, p in named_params if lamb_excluded(n)]
        self.state = {id(p): (torch.zeros_like(p), torch.zeros_like(p)) for p in self.adapt + self.plain}
        self.t = 0

    @torch.no_grad()
    def step(self, lr):
        self.t += 1
        params = self.adapt + self.plain
        grads = [p.grad for p in params]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        clip = self.clip / torch.clamp(norm, min=self.clip)
        torch._foreach_mul_(grads, clip)
        ms = [self.state[id(p)][0] for p in params]
        vs = [self.state[id(p)][1] for p in params]
        torch._foreach_lerp_(ms, grads, 1.0 - self.b1)  # m = b1 m + (1 - b1) g
        torch._foreach_mul_(vs, self.b2)
        torch._foreach_addcmul_(vs, grads, grads, 1.0 - self.b2)
        c1, c2 = 1.0 - self.b1 ** self.t, 1.0 - self.b2 ** self.t
        denom = torch._foreach_div(vs, c2)
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, self.eps)
        upd = torch._foreach_div(ms, denom)
        torch._foreach_div_(upd, c1)
        na = len(self.adapt)
        u_a, u_p = upd[:na], upd[na:]
        torch._foreach_add_(u_a, self.adapt, alpha=self.wd)
        w_norm = torch.stack(torch._foreach_norm(self.adapt))
        u_norm = torch.stack(torch._foreach_norm(u_a))
        ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
        torch._foreach_mul_(u_a, (-lr * ratio).tolist())
        torch._foreach_add_(self.adapt, u_a)
        torch._foreach_add_(self.plain, u_p, alpha=-lr)


def make_batch(batch, seq_len, preds, vocab, device, gen):
    ids = torch.randint(5, vocab, (batch, seq_len), generator=gen)
    segs = (torch.arange(seq_len)[None, :] >= seq_len // 2).long().expand(batch, -1).contiguous()
    pos = torch.stack([torch.randperm(seq_len - 1, generator=gen)[:preds] + 1 for _ in range(batch)])
    flat = (torch.arange(batch)[:, None] * seq_len + pos).reshape(-1)
    labels = torch.randint(5, vocab, (batch * preds,), generator=gen)
    return {
        "input_ids": ids.to(device),
        "token_type_ids": segs.to(device),
        "attention_mask": torch.ones(batch, seq_len, dtype=torch.long, device=device),
        "mlm_positions": flat.to(device),
        "mlm_labels": labels.to(device),
        "mlm_weights": torch.ones(batch * preds, device=device),
        "nsp_labels": torch.randint(0, 2, (batch,), generator=gen).to(device),
    }


def train_step(model, opt, b, lr, autocast=None):
    with torch.autocast(b["input_ids"].device.type, dtype=autocast, enabled=autocast is not None):
        out = model.bert(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                         token_type_ids=b["token_type_ids"])
        seq = out.last_hidden_state
        gathered = seq.reshape(-1, seq.shape[-1]).index_select(0, b["mlm_positions"])
        mlm_logits = model.cls.predictions(gathered)
        nsp_logits = model.cls.seq_relationship(out.pooler_output)
        per_ex = torch.nn.functional.cross_entropy(mlm_logits, b["mlm_labels"], reduction="none")
        w = b["mlm_weights"]
        loss = (w * per_ex).sum() / (w.sum() + 1e-5) + torch.nn.functional.cross_entropy(nsp_logits, b["nsp_labels"])
    model.zero_grad(set_to_none=False)
    loss.backward()
    opt.step(lr)
    return loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(SHAPES), default="mini")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--predictions", type=int, default=0, help="MLM slots per sequence (0: 20 at 128, 76 at 512)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave PyTorch's default)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="HF attention implementation")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--autocast", choices=["off", "bf16"], default="off",
                    help="bf16: forward and loss under torch.autocast (bf16 matmuls, fp32 master weights)")
    args = ap.parse_args()
    autocast = torch.bfloat16 if args.autocast == "bf16" else None
    if args.threads:
        torch.set_num_threads(args.threads)
    # The reference's max_predictions_per_seq: 20 at 128 and 76 at 512; about 15% elsewhere.
    preds = args.predictions or {128: 20, 512: 76}.get(args.seq_len, max(1, round(0.15 * args.seq_len)))
    torch.manual_seed(args.seed)
    cfg = BertConfig(vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu_new",
                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, layer_norm_eps=1e-12,
                     attn_implementation=args.attn, **SHAPES[args.model])
    device = torch.device(args.device)
    model = BertForPreTraining(cfg).to(device).train()
    opt = Lamb(list(model.named_parameters()))
    gen = torch.Generator().manual_seed(args.seed)
    batch = make_batch(args.batch, args.seq_len, preds, cfg.vocab_size, device, gen)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    for _ in range(args.warmup):
        train_step(model, opt, batch, 1e-4, autocast)
    sync()
    base = {"bench": "pytorch_step", "model": args.model, "batch": args.batch, "seq_len": args.seq_len,
            "predictions": preds, "threads": torch.get_num_threads(), "attn": args.attn, "device": str(device),
            "autocast": args.autocast,
            "torch": torch.__version__.split("+")[0], "params": sum(p.numel() for p in model.parameters())}
    best = math.inf
    for r in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            loss = train_step(model, opt, batch, 1e-4, autocast)
        sync()
        dt = (time.perf_counter() - t0) / args.steps
        cpu = (time.process_time() - c0) / args.steps
        best = min(best, dt)
        # On shared machines the wall time depends on the other work: the 1-minute load average and
        # the process CPU seconds per step (all threads) say how much of the cores this run had.
        print(json.dumps({**base, "repeat": r, "step_s": round(dt, 5), "seqs_per_s": round(args.batch / dt, 3),
                          "cpu_s_per_step": round(cpu, 4), "loadavg_1m": os.getloadavg()[0],
                          "loss": round(loss.detach().item(), 4)}), flush=True)
    print(json.dumps({**base, "summary": "best", "step_s": round(best, 5), "seqs_per_s": round(args.batch / best, 3)}),
          flush=True)


if __name__ == "__main__":
    main()
