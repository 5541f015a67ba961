"""Golden reference for the C++ BERT model: a tiny BERT's loss, logits, gradients and 3 LAMB steps.

What it implements
------------------
A small BERT pretraining model (vocab 99, hidden 32, 2 layers, 4 heads, intermediate 37) with
fixed, seeded random weights, run in float64 through PyTorch + transformers' BertForPreTraining
(tanh GELU "gelu_new", LayerNorm eps 1e-12, dropout 0, eager attention), on one fixed batch
(B=3, S=16, padded rows, 5 masked-LM slots per row of which some are padding slots with weight 0,
mixed NSP labels). The loss is the MLPerf reference loss, not the HF built-in one:

    mlm  = sum(w * CE(logits at gathered masked positions)) / (sum(w) + 1e-5)
    nsp  = mean CE over the batch
    loss = mlm + nsp

with an additive attention mask of exactly (1 - mask) * -10000 on the keys.

A second, independent implementation of the same forward pass, written directly from the
reference formulas on TF-layout tensors, must agree with the HF model (loss and every gradient)
before anything is written: this checks the HF configuration and the name/layout mapping.

Then 3 LAMB steps (reference formulas: global-norm clip to 1.0, bias-corrected moments, decoupled
weight decay, name-based exclusions, trust ratio with its zero-norm cases; polynomial decay with
linear warmup) are applied on the same batch, recomputing the loss each step.

A separate LAMB-only case ("lamb_unit/") feeds hand-made gradients to a handful of tensors that
hit every branch of the update: a zero weight, a zero gradient, excluded names and a gradient
whose global norm is above the clip.

Output: tests/golden/bert_tiny_golden.h5 (float64, except the batch: ints int32, mlm_weights
float32 as in batch.h):
    attrs: bert_config (JSON, bert_config.json field names), generator, torch/transformers
           versions, seed, LAMB hyperparameters (lamb_*), mlm_loss, nsp_loss, total_loss
    batch/{input_ids, segment_ids, position_ids, seq_id, input_mask} (B, S)
    batch/{mlm_positions (flat b*S+pos), mlm_labels, mlm_weights} (M,)
    batch/{cls_positions (flat), nsp_labels} (B,)
    param/<TF name>        every parameter, TF layout (kernels [in, out])
    grad/<TF name>         d(total_loss)/d(param), TF layout, before clipping
    mlm_logits (M, V), nsp_logits (B, 2), mlm_per_example (M,)
    lamb3/<TF name>        parameters after 3 LAMB steps
    lamb_steps/{loss, mlm_loss, nsp_loss} (4,)  losses before step 1, 2, 3 and after step 3
    lamb_steps/{lr, grad_norm} (3,)             lr used and unclipped global grad norm per step
    lamb_unit/...          see write_lamb_unit()

Run (from the repository root, with the reference venv that has requirements-reference.txt):
    python tests/reference/make_bert_golden.py [--out tests/golden/bert_tiny_golden.h5] [--check]
--check recomputes everything and compares with the existing file instead of writing it.
"""

import argparse
import json
import math
import re
import sys

import h5py
import numpy as np
import torch
import transformers
from transformers import BertConfig, BertForPreTraining

SEED = 20261202
MASK_VALUE = -10000.0
LOSS_DENOM_EPS = 1e-5

BERT_CONFIG = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    # The reference's "gelu" is the tanh approximation; HF calls that "gelu_new".
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}

# LAMB and schedule. start_warmup_step = -1 with 2 warmup steps makes all 3 steps move the weights
# while still covering the warmup ramp, the jump to the decay branch, and the decay itself:
# lr = 0.005, 0.009, 0.008.
LAMB = {
    "learning_rate": 1e-2,
    "beta1": 0.9,
    "beta2": 0.999,
    "epsilon": 1e-6,
    "weight_decay": 0.01,
    "max_grad_norm": 1.0,
    "train_steps": 10,
    "warmup_steps": 2,
    "start_warmup_step": -1,
    "poly_power": 1.0,
    "steps": 3,
}

# Special token ids of the toy vocabulary.
PAD, CLS, SEP, MASK = 0, 2, 3, 4


def tf_parameter_names(cfg):
    """The TF variable names in the order of our C++ tensor table (bert_params.cpp)."""
    names = [
        "bert/embeddings/word_embeddings",
        "bert/embeddings/position_embeddings",
        "bert/embeddings/token_type_embeddings",
        "bert/embeddings/LayerNorm/gamma",
        "bert/embeddings/LayerNorm/beta",
    ]
    for layer in range(cfg["num_hidden_layers"]):
        pre = f"bert/encoder/layer_{layer}/"
        for s in ("query", "key", "value"):
            names += [pre + f"attention/self/{s}/kernel", pre + f"attention/self/{s}/bias"]
        names += [pre + s for s in (
            "attention/output/dense/kernel", "attention/output/dense/bias",
            "attention/output/LayerNorm/gamma", "attention/output/LayerNorm/beta",
            "intermediate/dense/kernel", "intermediate/dense/bias",
            "output/dense/kernel", "output/dense/bias",
            "output/LayerNorm/gamma", "output/LayerNorm/beta")]
    names += [
        "bert/pooler/dense/kernel", "bert/pooler/dense/bias",
        "cls/predictions/output_bias",
        "cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
        "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
        "cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias",
    ]
    return names


def hf_to_tf_name(hf_name):
    """Maps an HF BertForPreTraining parameter name to (TF name, transpose?)."""
    n = hf_name
    if n == "cls.predictions.bias":
        return "cls/predictions/output_bias", False
    if n == "cls.seq_relationship.weight":
        # Stored [2, H] in TF as in HF: the reference multiplies by its transpose.
        return "cls/seq_relationship/output_weights", False
    if n == "cls.seq_relationship.bias":
        return "cls/seq_relationship/output_bias", False
    n = re.sub(r"^bert\.encoder\.layer\.(\d+)\.", r"bert.encoder.layer_\1.", n)
    n = re.sub(r"_embeddings\.weight$", "_embeddings", n)
    if n.endswith("embeddings"):
        return n.replace(".", "/"), False  # embedding tables are [rows, H] in both
    n = re.sub(r"LayerNorm\.weight$", "LayerNorm.gamma", n)
    n = re.sub(r"LayerNorm\.bias$", "LayerNorm.beta", n)
    transpose = n.endswith(".weight")  # nn.Linear weight is [out, in]; TF kernel is [in, out]
    n = re.sub(r"\.weight$", ".kernel", n)
    return n.replace(".", "/"), transpose


def make_hf_config():
    c = dict(BERT_CONFIG)
    c["hidden_act"] = "gelu_new"
    return BertConfig(**c, layer_norm_eps=1e-12, attn_implementation="eager")


def random_parameters(cfg, gen):
    """Non-trivial TF-layout weights: every bias and beta non-zero, every gamma away from 1."""
    shapes = {
        "bert/embeddings/word_embeddings": (cfg["vocab_size"], cfg["hidden_size"]),
        "bert/embeddings/position_embeddings": (cfg["max_position_embeddings"], cfg["hidden_size"]),
        "bert/embeddings/token_type_embeddings": (cfg["type_vocab_size"], cfg["hidden_size"]),
        "cls/predictions/output_bias": (cfg["vocab_size"],),
        "cls/seq_relationship/output_weights": (2, cfg["hidden_size"]),
        "cls/seq_relationship/output_bias": (2,),
    }
    H, I = cfg["hidden_size"], cfg["intermediate_size"]
    params = {}
    for name in tf_parameter_names(cfg):
        if name in shapes:
            shape = shapes[name]
        elif name.endswith("intermediate/dense/kernel"):
            shape = (H, I)
        elif name.endswith("intermediate/dense/bias"):
            shape = (I,)
        elif name.endswith("output/dense/kernel") and "attention" not in name:
            shape = (I, H)
        elif name.endswith("kernel"):
            shape = (H, H)
        else:
            shape = (H,)
        z = torch.randn(shape, generator=gen, dtype=torch.float64)
        if name.endswith("gamma"):
            t = 1.0 + 0.1 * z
        elif name.endswith("beta") or "bias" in name:
            t = 0.05 * z
        elif "embeddings" in name:
            t = 0.1 * z  # large enough that position and segment errors show in the logits
        else:
            # ~1/sqrt(fan_in) keeps activations O(1) so no GELU/tanh region is left untested.
            t = 0.1 * z
        params[name] = t
    return params


def make_batch(cfg):
    """B=3, S=16: one full row, two padded rows; 5 MLM slots per row (2 rows have padding slots)."""
    B, S, P = 3, 16, 5
    gen = np.random.default_rng(SEED + 1)
    lengths = [16, 11, 7]
    first_len = [8, 5, 3]  # [CLS] a... [SEP] counts into the first segment
    real_slots = [5, 4, 3]
    nsp_labels = [0, 1, 1]
    input_ids = np.zeros((B, S), np.int32)
    segment_ids = np.zeros((B, S), np.int32)
    seq_id = np.zeros((B, S), np.int32)
    mlm_positions = np.zeros((B, P), np.int32)
    mlm_labels = np.zeros((B, P), np.int32)
    mlm_weights = np.zeros((B, P), np.float32)
    for b in range(B):
        L, La = lengths[b], first_len[b]
        toks = gen.integers(5, cfg["vocab_size"], size=L)
        toks[0], toks[La - 1], toks[L - 1] = CLS, SEP, SEP
        input_ids[b, :L] = toks
        segment_ids[b, La:L] = 1
        seq_id[b, :L] = 1
        candidates = [p for p in range(1, L) if toks[p] not in (CLS, SEP)]
        pos = np.sort(gen.choice(candidates, size=real_slots[b], replace=False))
        for k, p in enumerate(pos):
            mlm_positions[b, k] = p
            mlm_labels[b, k] = toks[p]
            mlm_weights[b, k] = 1.0
            # 80/10/10 as in the data generator: mostly [MASK], one random, one kept.
            if k % 5 == 3:
                input_ids[b, p] = gen.integers(5, cfg["vocab_size"])
            elif k % 5 != 4:
                input_ids[b, p] = MASK
    flat_positions = (np.arange(B, dtype=np.int32)[:, None] * S + mlm_positions).reshape(-1)
    # Padding slots keep position 0 and label 0, as in the data; they gather row b's [CLS] vector.
    return {
        "input_ids": input_ids,
        "segment_ids": segment_ids,
        "position_ids": np.tile(np.arange(S, dtype=np.int32), (B, 1)),
        "seq_id": seq_id,
        "input_mask": (seq_id != 0).astype(np.int32),
        "mlm_positions": flat_positions.astype(np.int32),
        "mlm_labels": mlm_labels.reshape(-1),
        "mlm_weights": mlm_weights.reshape(-1),
        "cls_positions": (np.arange(B, dtype=np.int32) * S),
        "nsp_labels": np.array(nsp_labels, np.int32),
    }


def reference_loss(mlm_logits, nsp_logits, batch):
    labels = torch.from_numpy(batch["mlm_labels"]).long()
    w = torch.from_numpy(batch["mlm_weights"]).double()
    per_ex = -torch.log_softmax(mlm_logits, dim=-1).gather(1, labels[:, None])[:, 0]
    mlm = (w * per_ex).sum() / (w.sum() + LOSS_DENOM_EPS)
    nsp = torch.nn.functional.cross_entropy(nsp_logits, torch.from_numpy(batch["nsp_labels"]).long())
    return mlm, nsp, per_ex


class HFModel:
    """BertForPreTraining in float64 whose weights are loaded from / read back to TF layout."""

    def __init__(self, cfg):
        torch.manual_seed(SEED)
        self.model = BertForPreTraining(make_hf_config()).double()
        self.model.eval()  # dropout is 0 anyway; eval() makes that independent of the config
        m = self.model
        assert m.cls.predictions.decoder.weight is m.bert.embeddings.word_embeddings.weight, "decoder not tied"
        self.map = {}
        for hf_name, p in m.named_parameters():
            tf_name, transpose = hf_to_tf_name(hf_name)
            assert tf_name not in self.map, f"two HF parameters map to {tf_name}"
            self.map[tf_name] = (p, transpose)
        expected = set(tf_parameter_names(cfg))
        assert set(self.map) == expected, f"name mapping mismatch: {set(self.map) ^ expected}"

    def load(self, params):
        with torch.no_grad():
            for name, (p, transpose) in self.map.items():
                src = params[name].t() if transpose else params[name]
                assert p.shape == src.shape, (name, p.shape, src.shape)
                p.copy_(src)

    def loss_and_grads(self, batch):
        m = self.model
        m.zero_grad(set_to_none=True)
        B, S = batch["input_ids"].shape
        mask = torch.from_numpy(batch["input_mask"]).double()
        # A 4D float mask is used as-is by HF: exactly the reference's additive -10000 on keys.
        additive = ((1.0 - mask) * MASK_VALUE)[:, None, None, :]
        out = m.bert(
            input_ids=torch.from_numpy(batch["input_ids"]).long(),
            attention_mask=additive,
            token_type_ids=torch.from_numpy(batch["segment_ids"]).long(),
            position_ids=torch.from_numpy(batch["position_ids"]).long(),
        )
        seq = out.last_hidden_state.reshape(B * S, -1)
        gathered = seq[torch.from_numpy(batch["mlm_positions"]).long()]
        mlm_logits = m.cls.predictions(gathered)
        nsp_logits = m.cls.seq_relationship(out.pooler_output)
        mlm, nsp, per_ex = reference_loss(mlm_logits, nsp_logits, batch)
        total = mlm + nsp
        total.backward()
        grads = {}
        for name, (p, transpose) in self.map.items():
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            grads[name] = (g.t() if transpose else g).detach().clone()
        return {
            "mlm_loss": mlm.item(), "nsp_loss": nsp.item(), "total_loss": total.item(),
            "mlm_logits": mlm_logits.detach(), "nsp_logits": nsp_logits.detach(),
            "mlm_per_example": per_ex.detach(), "grads": grads,
        }


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, gamma, beta):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased, as in the reference
    return gamma * (x - mu) / torch.sqrt(var + 1e-12) + beta


def formula_forward(params, batch, cfg):
    """The reference forward pass written from its formulas on TF-layout tensors (cross-check)."""
    p = params
    B, S = batch["input_ids"].shape
    H, A = cfg["hidden_size"], cfg["num_attention_heads"]
    D = H // A
    ids = torch.from_numpy(batch["input_ids"]).long()
    seg = torch.from_numpy(batch["segment_ids"]).long()
    pos = torch.from_numpy(batch["position_ids"]).long()
    x = p["bert/embeddings/word_embeddings"][ids] + p["bert/embeddings/token_type_embeddings"][seg] \
        + p["bert/embeddings/position_embeddings"][pos]
    x = layer_norm(x, p["bert/embeddings/LayerNorm/gamma"], p["bert/embeddings/LayerNorm/beta"])
    bias = (1.0 - torch.from_numpy(batch["input_mask"]).double()) * MASK_VALUE  # [B, S] over keys
    for layer in range(cfg["num_hidden_layers"]):
        q_ = lambda n: p[f"bert/encoder/layer_{layer}/{n}"]
        heads = lambda t: t.reshape(B, S, A, D).permute(0, 2, 1, 3)
        q = heads(x @ q_("attention/self/query/kernel") + q_("attention/self/query/bias"))
        k = heads(x @ q_("attention/self/key/kernel") + q_("attention/self/key/bias"))
        v = heads(x @ q_("attention/self/value/kernel") + q_("attention/self/value/bias"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(D) + bias[:, None, None, :]
        ctx = (torch.softmax(scores, -1) @ v).permute(0, 2, 1, 3).reshape(B, S, H)
        attn = ctx @ q_("attention/output/dense/kernel") + q_("attention/output/dense/bias")
        x = layer_norm(attn + x, q_("attention/output/LayerNorm/gamma"), q_("attention/output/LayerNorm/beta"))
        inter = gelu_tanh(x @ q_("intermediate/dense/kernel") + q_("intermediate/dense/bias"))
        out = inter @ q_("output/dense/kernel") + q_("output/dense/bias")
        x = layer_norm(out + x, q_("output/LayerNorm/gamma"), q_("output/LayerNorm/beta"))
    flat = x.reshape(B * S, H)
    cls = flat[torch.from_numpy(batch["cls_positions"]).long()]
    pooled = torch.tanh(cls @ p["bert/pooler/dense/kernel"] + p["bert/pooler/dense/bias"])
    h = flat[torch.from_numpy(batch["mlm_positions"]).long()]
    h = gelu_tanh(h @ p["cls/predictions/transform/dense/kernel"] + p["cls/predictions/transform/dense/bias"])
    h = layer_norm(h, p["cls/predictions/transform/LayerNorm/gamma"], p["cls/predictions/transform/LayerNorm/beta"])
    mlm_logits = h @ p["bert/embeddings/word_embeddings"].t() + p["cls/predictions/output_bias"]
    nsp_logits = pooled @ p["cls/seq_relationship/output_weights"].t() + p["cls/seq_relationship/output_bias"]
    return mlm_logits, nsp_logits


def formula_loss_and_grads(params, batch, cfg):
    leaves = {n: t.clone().requires_grad_(True) for n, t in params.items()}
    mlm_logits, nsp_logits = formula_forward(leaves, batch, cfg)
    mlm, nsp, _ = reference_loss(mlm_logits, nsp_logits, batch)
    total = mlm + nsp
    total.backward()
    return total.item(), mlm_logits.detach(), nsp_logits.detach(), {n: t.grad for n, t in leaves.items()}


# ---- LAMB, from the reference formulas -------------------------------------------------------------

def lamb_excluded(name):
    # The reference matches these as regex searches on the name; all are plain substrings.
    return any(s in name for s in ("LayerNorm", "layer_norm", "bias"))


def learning_rate(step, h):
    """Polynomial decay with linear warmup; step = global_step before the increment (0-based)."""
    T = h["train_steps"]
    lr = h["learning_rate"] * (1.0 - min(step, T) / T) ** h["poly_power"]
    if h["warmup_steps"]:
        s = step - h["start_warmup_step"]
        if s < h["warmup_steps"]:
            lr = h["learning_rate"] * s / h["warmup_steps"]
    return lr


def global_norm(grads):
    return math.sqrt(sum(float((g * g).sum()) for g in grads.values()))


def lamb_step(params, grads, state, step, h):
    """One reference LAMB update of params in place (step 0-based). Returns (lr, unclipped norm)."""
    norm = global_norm(grads)
    clip = h["max_grad_norm"] / max(norm, h["max_grad_norm"])
    lr = learning_rate(step, h)
    t = step + 1
    b1, b2 = h["beta1"], h["beta2"]
    for name, w in params.items():
        g = grads[name] * clip
        m, v = state.setdefault(name, (torch.zeros_like(w), torch.zeros_like(w)))
        m = b1 * m + (1.0 - b1) * g
        v = b2 * v + (1.0 - b2) * g * g
        state[name] = (m, v)
        u = (m / (1.0 - b1 ** t)) / (torch.sqrt(v / (1.0 - b2 ** t)) + h["epsilon"])
        if not lamb_excluded(name):
            u = u + h["weight_decay"] * w
        ratio = 1.0
        if not lamb_excluded(name):
            w_norm, u_norm = float(w.norm()), float(u.norm())
            ratio = (w_norm / u_norm if u_norm > 0 else 1.0) if w_norm > 0 else 1.0
        params[name] = w - ratio * lr * u
    return lr, norm


def write_lamb_unit(f, h):
    """LAMB alone on hand-made tensors that cover every branch, 3 steps with given gradients.

    Tensors: a decayed kernel; a kernel whose weight is all zero (||w|| = 0 -> ratio 1); a kernel
    with zero gradient throughout (u = decay * w only); a zero weight with zero gradient (u = 0);
    a bias, a LayerNorm gamma and a layer_norm-named tensor (excluded: no decay, ratio 1). The
    gradients are scaled so the global norm is above the clip at steps 1 and 3 and below at step 2.
    Layout: lamb_unit/param/<name>, lamb_unit/grad_<k>/<name>, lamb_unit/after_<k>/<name>
    (k = 1..3, grad_<k> unclipped) and lamb_unit/{lr, grad_norm} (3,).
    """
    gen = torch.Generator().manual_seed(SEED + 2)
    shapes = {
        "a/dense/kernel": (4, 3),
        "a/zero_weight/kernel": (3, 2),
        "a/zero_grad/kernel": (2, 5),
        "a/zero_both/kernel": (2, 2),
        "a/dense/bias": (3,),
        "a/LayerNorm/gamma": (3,),
        "a/layer_norm/scale": (4,),
    }
    params = {}
    for n, s in shapes.items():
        params[n] = torch.zeros(s, dtype=torch.float64) if "zero_weight" in n or "zero_both" in n \
            else 0.5 * torch.randn(s, generator=gen, dtype=torch.float64)
    g = f.create_group("lamb_unit")
    for n, t in params.items():
        g[f"param/{n}"] = t.numpy()
    state, lrs, norms = {}, [], []
    for step, scale in enumerate((3.0, 0.2, 1.5)):
        grads = {}
        for n, s in shapes.items():
            z = torch.randn(s, generator=gen, dtype=torch.float64)
            grads[n] = torch.zeros(s, dtype=torch.float64) if "zero_grad" in n or "zero_both" in n else z
        k = scale / global_norm(grads)
        grads = {n: t * k for n, t in grads.items()}
        lr, norm = lamb_step(params, grads, state, step, h)
        lrs.append(lr)
        norms.append(norm)
        for n in shapes:
            g[f"grad_{step + 1}/{n}"] = grads[n].numpy()
            g[f"after_{step + 1}/{n}"] = params[n].numpy()
    assert torch.all(params["a/zero_both/kernel"] == 0)
    g["lr"] = np.array(lrs)
    g["grad_norm"] = np.array(norms)


# ---- main ---------------------------------------------------------------------------------------------

def generate(path):
    torch.use_deterministic_algorithms(True)
    cfg = BERT_CONFIG
    gen = torch.Generator().manual_seed(SEED)
    params = random_parameters(cfg, gen)
    batch = make_batch(cfg)
    hf = HFModel(cfg)
    hf.load(params)
    r = hf.loss_and_grads(batch)

    # Independent implementation from the formulas must agree with the HF model.
    total2, mlm2, nsp2, grads2 = formula_loss_and_grads(params, batch, cfg)
    assert abs(total2 - r["total_loss"]) < 1e-12, (total2, r["total_loss"])
    assert torch.allclose(mlm2, r["mlm_logits"], rtol=0, atol=1e-12)
    assert torch.allclose(nsp2, r["nsp_logits"], rtol=0, atol=1e-12)
    for n in params:
        scale = max(1.0, float(grads2[n].abs().max()))
        assert float((grads2[n] - r["grads"][n]).abs().max()) < 1e-12 * scale, n
        assert float(r["grads"][n].abs().max()) > 0, f"{n} has a zero gradient: it would not be tested"

    with h5py.File(path, "w") as f:
        f.attrs["bert_config"] = json.dumps(cfg, indent=2)
        f.attrs["generator"] = "tests/reference/make_bert_golden.py"
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["transformers_version"] = str(transformers.__version__)
        f.attrs["seed"] = SEED
        f.attrs["attention_mask_value"] = MASK_VALUE
        f.attrs["layer_norm_eps"] = 1e-12
        f.attrs["mlm_loss_denominator_eps"] = LOSS_DENOM_EPS
        for k, v in LAMB.items():
            f.attrs["lamb_" + k] = v
        for k in ("mlm_loss", "nsp_loss", "total_loss"):
            f.attrs[k] = r[k]
        for k, v in batch.items():
            f[f"batch/{k}"] = v
        f["batch"].attrs["rows"], f["batch"].attrs["seq_len"] = batch["input_ids"].shape
        for n in tf_parameter_names(cfg):
            f[f"param/{n}"] = params[n].numpy()
            f[f"grad/{n}"] = r["grads"][n].numpy()
        f["mlm_logits"] = r["mlm_logits"].numpy()
        f["nsp_logits"] = r["nsp_logits"].numpy()
        f["mlm_per_example"] = r["mlm_per_example"].numpy()

        # 3 LAMB steps on the same batch, each with a fresh forward/backward.
        state, w = {}, dict(params)
        losses = {"loss": [r["total_loss"]], "mlm_loss": [r["mlm_loss"]], "nsp_loss": [r["nsp_loss"]]}
        lrs, norms = [], []
        grads = r["grads"]
        for step in range(LAMB["steps"]):
            lr, norm = lamb_step(w, grads, state, step, LAMB)
            lrs.append(lr)
            norms.append(norm)
            hf.load(w)
            rs = hf.loss_and_grads(batch)
            grads = rs["grads"]
            for k, key in (("loss", "total_loss"), ("mlm_loss", "mlm_loss"), ("nsp_loss", "nsp_loss")):
                losses[k].append(rs[key])
        for n in tf_parameter_names(cfg):
            f[f"lamb3/{n}"] = w[n].numpy()
        for k, v in losses.items():
            f[f"lamb_steps/{k}"] = np.array(v)
        f["lamb_steps/lr"] = np.array(lrs)
        f["lamb_steps/grad_norm"] = np.array(norms)
        write_lamb_unit(f, LAMB)

    print(json.dumps({"out": path, "total_loss": r["total_loss"], "mlm_loss": r["mlm_loss"],
                      "nsp_loss": r["nsp_loss"], "losses": losses["loss"], "lr": lrs, "grad_norm": norms}))


def compare(path, fresh):
    """Every dataset and numeric attribute of fresh equals path's to 1e-12 (relative to max(1, |x|))."""
    bad = []
    with h5py.File(path, "r") as a, h5py.File(fresh, "r") as b:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                x, y = obj[()], b[name][()]
                if x.shape != y.shape or not np.allclose(x, y, rtol=1e-12, atol=1e-12):
                    bad.append(name)
        a.visititems(visit)
        for k, v in a.attrs.items():
            if isinstance(v, (float, np.floating)) and abs(v - b.attrs[k]) > 1e-12 * max(1.0, abs(v)):
                bad.append("@" + k)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/golden/bert_tiny_golden.h5")
    ap.add_argument("--check", action="store_true", help="regenerate to a temp file and compare")
    args = ap.parse_args()
    if args.check:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            fresh = d + "/golden.h5"
            generate(fresh)
            bad = compare(args.out, fresh)
        print("check:", "OK" if not bad else f"{len(bad)} differ: {bad[:10]}")
        sys.exit(1 if bad else 0)
    generate(args.out)


if __name__ == "__main__":
    main()
