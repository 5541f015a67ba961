"""Consistency of the tiny-BERT golden file (tests/golden/bert_tiny_golden.h5) without PyTorch.

The golden is produced by tests/reference/make_bert_golden.py in its own venv. These tests only
need numpy and h5py: they check the layout the C++ tests rely on and recompute from the stored
arrays what can be recomputed in a few lines (the loss from the logits, LAMB on the lamb_unit
case, the learning rates), so a damaged or hand-edited golden fails here rather than as a
puzzling C++ mismatch.

Run: .venv/bin/python -m pytest -q tests/python/test_bert_golden.py
"""

import json
import math
import pathlib

import h5py
import numpy as np
import pytest

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden" / "bert_tiny_golden.h5"


@pytest.fixture(scope="module")
def golden():
    with h5py.File(GOLDEN, "r") as f:
        yield f


def tensors(group):
    out = {}
    group.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def test_size_and_config(golden):
    assert GOLDEN.stat().st_size < 1 << 20
    cfg = json.loads(golden.attrs["bert_config"])
    assert cfg["hidden_act"] == "gelu"
    assert cfg["hidden_size"] % cfg["num_attention_heads"] == 0


def test_parameter_names_and_layout(golden):
    cfg = json.loads(golden.attrs["bert_config"])
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    params = tensors(golden["param"])
    per_layer = 16
    assert len(params) == 5 + per_layer * cfg["num_hidden_layers"] + 9
    assert params["bert/embeddings/word_embeddings"].shape == (V, H)
    assert params["bert/encoder/layer_0/intermediate/dense/kernel"].shape == (H, I)  # [in, out]
    assert params["bert/encoder/layer_0/output/dense/kernel"].shape == (I, H)
    assert params["cls/seq_relationship/output_weights"].shape == (2, H)
    for group in ("grad", "lamb3"):
        other = tensors(golden[group])
        assert other.keys() == params.keys()
        assert all(other[n].shape == params[n].shape for n in params)
    for n, g in tensors(golden["grad"]).items():
        assert np.abs(g).max() > 0, f"{n}: zero gradient"


def test_loss_from_logits(golden):
    b = tensors(golden["batch"])
    logits = golden["mlm_logits"][()]
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    per_ex = lse - logits[np.arange(len(logits)), b["mlm_labels"]]
    np.testing.assert_allclose(per_ex, golden["mlm_per_example"][()], rtol=1e-12)
    w = b["mlm_weights"].astype(np.float64)
    mlm = (w * per_ex).sum() / (w.sum() + 1e-5)
    nsp_logits = golden["nsp_logits"][()]
    nsp_lse = np.log(np.exp(nsp_logits).sum(1))
    nsp = (nsp_lse - nsp_logits[np.arange(len(nsp_logits)), b["nsp_labels"]]).mean()
    assert mlm == pytest.approx(golden.attrs["mlm_loss"], rel=1e-12)
    assert nsp == pytest.approx(golden.attrs["nsp_loss"], rel=1e-12)
    assert golden.attrs["total_loss"] == pytest.approx(mlm + nsp, rel=1e-12)
    assert golden["lamb_steps/loss"][0] == golden.attrs["total_loss"]


def test_batch_fields(golden):
    b = tensors(golden["batch"])
    B, S = b["input_ids"].shape
    assert (golden["batch"].attrs["rows"], golden["batch"].attrs["seq_len"]) == (B, S)
    assert (b["cls_positions"] == np.arange(B) * S).all()
    pad = b["mlm_weights"] == 0
    assert pad.any() and (~pad).any()
    assert (b["mlm_labels"][pad] == 0).all()
    assert (b["mlm_positions"][pad] % S == 0).all()  # padding slots gather the row's [CLS]
    assert (b["input_mask"] == (b["seq_id"] != 0)).all()
    assert (b["seq_id"] == 0).any()


def reference_lr(step, a):
    T = a["lamb_train_steps"]
    lr = a["lamb_learning_rate"] * (1 - min(step, T) / T) ** a["lamb_poly_power"]
    if a["lamb_warmup_steps"] and step - a["lamb_start_warmup_step"] < a["lamb_warmup_steps"]:
        lr = a["lamb_learning_rate"] * (step - a["lamb_start_warmup_step"]) / a["lamb_warmup_steps"]
    return lr


def test_schedule(golden):
    a = dict(golden.attrs)
    lrs = golden["lamb_steps/lr"][()]
    assert list(lrs) == pytest.approx([reference_lr(s, a) for s in range(len(lrs))], rel=1e-15)
    assert all(lr > 0 for lr in lrs)
    assert golden["lamb_steps/loss"][-1] < golden["lamb_steps/loss"][0]


def test_lamb_unit_case(golden):
    """LAMB from the reference formulas in numpy against the stored lamb_unit steps."""
    a = dict(golden.attrs)
    g = golden["lamb_unit"]
    w = tensors(g["param"])
    m = {n: np.zeros_like(t) for n, t in w.items()}
    v = {n: np.zeros_like(t) for n, t in w.items()}
    b1, b2, eps, wd = a["lamb_beta1"], a["lamb_beta2"], a["lamb_epsilon"], a["lamb_weight_decay"]
    for k in range(3):
        grads = tensors(g[f"grad_{k + 1}"])
        norm = math.sqrt(sum((x * x).sum() for x in grads.values()))
        assert norm == pytest.approx(g["grad_norm"][k], rel=1e-14)
        scale = 1.0 / max(norm, 1.0)
        lr, t = g["lr"][k], k + 1
        for n in w:
            gr = grads[n] * scale
            m[n] = b1 * m[n] + (1 - b1) * gr
            v[n] = b2 * v[n] + (1 - b2) * gr * gr
            u = (m[n] / (1 - b1 ** t)) / (np.sqrt(v[n] / (1 - b2 ** t)) + eps)
            excluded = any(s in n for s in ("LayerNorm", "layer_norm", "bias"))
            r = 1.0
            if not excluded:
                u = u + wd * w[n]
                wn, un = np.linalg.norm(w[n]), np.linalg.norm(u)
                r = wn / un if wn > 0 and un > 0 else 1.0
            w[n] = w[n] - r * lr * u
        after = tensors(g[f"after_{k + 1}"])
        for n in w:
            np.testing.assert_allclose(w[n], after[n], rtol=1e-13, atol=1e-15, err_msg=f"step {t} {n}")
