#!/usr/bin/env python3
"""Writes a TF1 checkpoint of BERT with known random values: by default the tiny golden input of
tests/cpp/test_tf_checkpoint.cpp; with --bert-config, one of any size (e.g. BERT-large, to check the
converter at the size of the MLPerf phase-1 checkpoint, which cannot be downloaded everywhere).

The checkpoint is written by TensorFlow itself (tf.compat.v1 graph variables and a tf.compat.v1
Saver, i.e. the TF1 "V2" tensor-bundle format of the MLPerf phase-1 checkpoint model.ckpt-28252), so
it tests our C++ bundle reader against the real writer. It holds the reference's trainable variables
(TF names and shapes from the reference's modeling.py / run_pretraining.py) for a tiny bert_config,
plus what the real checkpoint also holds and a loader must skip: two LAMB slots per variable
(<var>/LAMB, <var>/LAMB_1) and an int64 global_step.

Outputs, in --out (default tests/golden/tf1_tiny):
  bert_config.json                    the tiny model config
  model.ckpt-28252.index              the checkpoint (index + one data shard); the .meta graph and
  model.ckpt-28252.data-00000-of-00001  the 'checkpoint' state file are not kept
  expected.h5                         every variable's value as TF holds it, keyed by its TF name
                                      with '/' replaced by '.' (a TF name may be a prefix of another,
                                      e.g. a variable and its slot, which HDF5 groups cannot express)

TensorFlow is needed only to regenerate these files. Install the tensorflow-cpu pin of
requirements-reference.txt into a scratch environment of its own, not the project's .venv:
  python3 -m venv <dir> && <dir>/bin/pip install tensorflow-cpu==<pin>
  <dir>/bin/python scripts/make_tf1_checkpoint.py
"""
import argparse
import json
import os

import h5py
import numpy as np

TINY_CONFIG = {
    "vocab_size": 32,
    "hidden_size": 8,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 16,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 16,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}

STEP = 28252


def trainable_variables(cfg):
    """(TF name, shape) of every trainable variable of the reference pretraining model."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    out = [
        ("bert/embeddings/word_embeddings", [v, h]),
        ("bert/embeddings/token_type_embeddings", [cfg["type_vocab_size"], h]),
        ("bert/embeddings/position_embeddings", [cfg["max_position_embeddings"], h]),
        ("bert/embeddings/LayerNorm/gamma", [h]),
        ("bert/embeddings/LayerNorm/beta", [h]),
    ]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"bert/encoder/layer_{layer}/"
        for part in ("query", "key", "value"):
            out += [(p + f"attention/self/{part}/kernel", [h, h]), (p + f"attention/self/{part}/bias", [h])]
        out += [
            (p + "attention/output/dense/kernel", [h, h]),
            (p + "attention/output/dense/bias", [h]),
            (p + "attention/output/LayerNorm/gamma", [h]),
            (p + "attention/output/LayerNorm/beta", [h]),
            (p + "intermediate/dense/kernel", [h, i]),
            (p + "intermediate/dense/bias", [i]),
            (p + "output/dense/kernel", [i, h]),
            (p + "output/dense/bias", [h]),
            (p + "output/LayerNorm/gamma", [h]),
            (p + "output/LayerNorm/beta", [h]),
        ]
    out += [
        ("bert/pooler/dense/kernel", [h, h]),
        ("bert/pooler/dense/bias", [h]),
        ("cls/predictions/transform/dense/kernel", [h, h]),
        ("cls/predictions/transform/dense/bias", [h]),
        ("cls/predictions/transform/LayerNorm/gamma", [h]),
        ("cls/predictions/transform/LayerNorm/beta", [h]),
        ("cls/predictions/output_bias", [v]),
        ("cls/seq_relationship/output_weights", [2, h]),
        ("cls/seq_relationship/output_bias", [2]),
    ]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden", "tf1_tiny"))
    parser.add_argument("--seed", type=int, default=20260)
    parser.add_argument("--bert-config", help="model config JSON (default: the tiny golden config)")
    parser.add_argument("--no-slots", action="store_true", help="leave out the LAMB slots")
    parser.add_argument("--no-expected", action="store_true", help="do not write expected.h5")
    args = parser.parse_args()
    config = TINY_CONFIG
    if args.bert_config:
        with open(args.bert_config) as f:
            config = json.load(f)

    import tensorflow as tf  # only here, so --help works without it

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)

    values = {}
    for name, shape in trainable_variables(config):
        values[name] = rng.standard_normal(shape).astype(np.float32)
        if not args.no_slots:
            # The slots get other values, so a reader that returns a slot for its variable is caught.
            values[name + "/LAMB"] = rng.standard_normal(shape).astype(np.float32)
            values[name + "/LAMB_1"] = np.abs(rng.standard_normal(shape).astype(np.float32))
    values["global_step"] = np.array(STEP, dtype=np.int64)

    graph = tf.Graph()
    with graph.as_default():
        variables = {}
        for name, value in values.items():
            scope, _, leaf = name.rpartition("/")
            trainable = not name.endswith(("/LAMB", "/LAMB_1")) and name != "global_step"
            with tf1.variable_scope(scope or tf1.get_variable_scope(), auxiliary_name_scope=False):
                # Zero-initialised, then loaded from numpy: a constant initializer would put the values
                # into the graph, which cannot exceed 2 GB.
                var = tf1.get_variable(leaf, shape=value.shape, dtype=tf.as_dtype(value.dtype),
                                       initializer=tf1.zeros_initializer(), trainable=trainable)
            assert var.op.name == name, (var.op.name, name)
            variables[name] = var
        saver = tf1.train.Saver(write_version=tf1.train.SaverDef.V2)
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            for name, var in variables.items():
                var.load(values[name], sess)
            prefix = saver.save(sess, os.path.join(args.out, "model.ckpt"), global_step=STEP, write_meta_graph=False)

    # Read back through TensorFlow's own reader: the expected values are what TF holds.
    reader = tf.train.load_checkpoint(prefix)
    stored = reader.get_variable_to_shape_map()
    assert set(stored) == set(values), sorted(set(stored) ^ set(values))
    for name in sorted(values):
        assert np.array_equal(reader.get_tensor(name), values[name]), name
    if not args.no_expected:
        with h5py.File(os.path.join(args.out, "expected.h5"), "w") as f:
            for name in sorted(values):
                f.create_dataset(name.replace("/", "."), data=reader.get_tensor(name))
    with open(os.path.join(args.out, "bert_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    state = os.path.join(args.out, "checkpoint")
    if os.path.exists(state):
        os.remove(state)
    print(f"wrote {prefix}.index, its data shard and expected.h5 ({len(values)} tensors)")


if __name__ == "__main__":
    main()
