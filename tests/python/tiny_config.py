"""The training config of the Python tests that train, once: the committed config of the tiny benchmark
(tests/configs/tiny/cpu_2c.json: two 16-wide layers, sequences of 32 tokens, batches of 8 on one CPU thread) with a
test's changes."""
import json

from bertperf_paths import REPO

TINY_CONFIG = REPO / "tests" / "configs" / "tiny" / "cpu_2c.json"


def tiny_config(**changes):
    """The tiny config as a dict, without its notes, with `changes` applied: each names a key by its path joined with
    "__" (bert_config__num_hidden_layers=24) and sets it, or removes it when the value is None."""
    config = json.loads(TINY_CONFIG.read_text())
    config.pop("notes", None)
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = config
        for parent in parents:
            node = node[parent]
        if value is None:
            node.pop(key, None)
        else:
            node[key] = value
    return config


def write_tiny_config(path, **changes):
    """Writes tiny_config(**changes) to `path` and returns the path."""
    path.write_text(json.dumps(tiny_config(**changes)))
    return path
