"""Hostile input through the `bertperf` command line: every case ends in exit 0 or one error line and exit 2,
within seconds; never a signal, a hang, HDF5's own error dump or a silently wrong value. Data and configs are
generated here with `bertperf data` from a few lines of text and a small vocabulary."""
import json
import random
import resource
import signal
import subprocess

import pytest

from bertperf_paths import find_binary
from tiny_config import write_tiny_config

BERTPERF = find_binary("bertperf")
pytestmark = pytest.mark.skipif(BERTPERF is None, reason="build/bin/bertperf is not built")

WORDS = ("the cat sat on a mat and the dog ran to it while birds sang in trees near an old house by the river "
         "where children played games all day long until dark came").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS)) + ["."]


def run(args, timeout=60, small_disk=False):
    def limit_file_size():
        # A full disk without privileges: writes past 256 KiB fail with EFBIG (SIGXFSZ ignored).
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))
    return subprocess.run([str(BERTPERF)] + [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit_file_size if small_disk else None)


def assert_one_line_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert lines and "error" in lines[-1], proc.stderr[-2000:]
    assert "HDF5-DIAG" not in proc.stderr
    for needle in needles:
        assert needle in lines[-1], lines[-1]
    return lines[-1]


def write_text(path, documents, sentences, seed=0):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(documents):
            for _ in range(sentences):
                f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + " .\n")
            f.write("\n")
    return path


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """vocab.txt, train and eval shards (seq_len 32) and a valid config beside benchmark.json."""
    d = tmp_path_factory.mktemp("hostile")
    (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    for name, docs in (("train", 40), ("eval", 6), ("short", 1)):
        write_text(d / f"{name}.txt", docs, 8 if name != "short" else 2, seed=len(name))
        proc = run(["data", "--vocab", d / "vocab.txt", "--out", d, "--max-seq-length", 32, "--max-predictions", 5,
                    "--dupe-factor", 1, d / f"{name}.txt"])
        assert proc.returncode == 0, proc.stderr
    (d / "benchmark.json").write_text(json.dumps({
        "name": "hostile", "submission_benchmark": "bert", "division": "open", "target_accuracy": 0.5,
        "eval_samples": 8, "runs": 1,
        "eval_interval": {"scale": 1.0, "per_global_batch_sample": 0.0, "offset": 64, "round_down_to": 1}}))
    return d


def config(d, name="config.json", **overrides):
    """The tiny config (tiny_config.py) on this workspace's data and vocabulary: one layer, batches of 4."""
    hostile = dict(benchmark="hostile", system="test_cpu", bert_config__vocab_size=len(VOCAB),
                   bert_config__num_hidden_layers=1, data__train_files=["train.txt.hdf5"],
                   data__eval_file="eval.txt.hdf5", batch__local_batch_size=4, lamb__learning_rate=0.01,
                   lamb__train_steps=100, eval__batch_size=4, max_samples=None)
    return write_tiny_config(d / name, **{**hostile, **overrides})


def test_valid_workspace_trains(workspace):
    proc = run(["train", "--config", config(workspace), "--steps", 2, "--save", workspace / "ok.h5"])
    assert proc.returncode == 0, proc.stderr
    assert (workspace / "ok.h5").is_file()


def test_full_disk_during_checkpoint_save_is_one_line(workspace):
    # A model whose checkpoint is over the 256 KiB limit: the write fails part-way.
    cfg = config(workspace, "big.json", bert_config__hidden_size=128, bert_config__intermediate_size=512)
    proc = run(["train", "--config", cfg, "--steps", 1, "--save", workspace / "full.h5"], small_disk=True)
    assert_one_line_error(proc, "full.h5", "disk full")
    assert not (workspace / "full.h5").exists()
    assert not list(workspace.glob("full.h5.tmp-*"))


def test_full_disk_during_data_is_one_line(workspace, tmp_path):
    text = write_text(tmp_path / "big.txt", 400, 10)
    proc = run(["data", "--vocab", workspace / "vocab.txt", "--out", tmp_path, "--max-seq-length", 32,
                "--max-predictions", 5, "--dupe-factor", 1, text], small_disk=True)
    assert_one_line_error(proc, "big.txt.hdf5", "disk full")
    assert not (tmp_path / "big.txt.hdf5").exists()


def test_shard_with_fewer_rows_than_one_batch_is_an_error_not_a_hang(workspace):
    cfg = config(workspace, "short.json", data__train_files=["short.txt.hdf5"], batch__local_batch_size=64)
    assert_one_line_error(run(["train", "--config", cfg, "--steps", 1], timeout=60), "fewer than one batch")


@pytest.mark.parametrize("seed", range(12))
def test_byte_flips_in_the_training_shard_end_cleanly(workspace, tmp_path, seed):
    data = bytearray((workspace / "train.txt.hdf5").read_bytes())
    rng = random.Random(seed)
    for _ in range(rng.randint(1, 16)):
        data[rng.randrange(2048, len(data))] ^= rng.randrange(1, 256)
    (tmp_path / "train.txt.hdf5").write_bytes(bytes(data))
    (tmp_path / "eval.txt.hdf5").write_bytes((workspace / "eval.txt.hdf5").read_bytes())
    (tmp_path / "benchmark.json").write_text((workspace / "benchmark.json").read_text())
    proc = run(["train", "--config", config(tmp_path), "--steps", 2], timeout=60)
    assert proc.returncode in (0, 2), (proc.returncode, proc.stderr[-2000:])
    assert "HDF5-DIAG" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 1, proc.stderr[-2000:]


def test_model_over_the_machines_memory_is_refused_with_the_figure(workspace):
    cfg = config(workspace, "huge.json", bert_config__num_hidden_layers=1000000, bert_config__hidden_size=1024,
                 bert_config__num_attention_heads=16, bert_config__intermediate_size=4096)
    line = assert_one_line_error(run(["train", "--config", cfg, "--steps", 1], timeout=30), "needs at least", "GiB")
    assert "num_hidden_layers" in line


@pytest.mark.parametrize("text, needle", [
    ('"learning_rate": 1e400', "field 'lamb.learning_rate'"),
    ('"local_batch_size": 2147483647', "field 'local_batch_size' 2147483647"),
    ('"train_steps": 9223372036854775807', "overflows the sample count"),
])
def test_config_values_out_of_range_name_their_field(workspace, text, needle):
    cfg = config(workspace, "range.json")
    key = text.split('"')[1]
    body = cfg.read_text()
    start = body.index(f'"{key}": ')
    end = min(i for i in (body.find(",", start), body.find("}", start)) if i >= 0)
    cfg.write_text(body[:start] + text + body[end:])
    line = assert_one_line_error(run(["train", "--config", cfg, "--steps", 1]), str(cfg), needle)
    assert "max_samples -" not in line


def test_nested_and_huge_values_of_the_wrong_type_print_a_short_line(workspace):
    cfg = config(workspace, "nested.json")
    body = cfg.read_text().replace('"seq_len": 32', '"seq_len": ' + "[" * 100000 + "]" * 100000)
    cfg.write_text(body)
    line = assert_one_line_error(run(["train", "--config", cfg]), "field 'seq_len' must be an integer")
    assert len(line) < 400
    cfg.write_text(config(workspace, "nested.json").read_text().replace('"seq_len": 32', '"seq_len": ' +
                                                                       json.dumps(list(range(1000000)))))
    line = assert_one_line_error(run(["train", "--config", cfg]), "got [0,1,2,3,4,5,6,7,8,9,10")
    assert len(line) < 400


@pytest.mark.parametrize("args, needle", [
    (["train", "--config", "{dir}"], "is a directory"),
    (["data", "--vocab", "{vocab}", "--out", "{tmp}", "{dir}"], "is a directory"),
    (["data", "--vocab", "{vocab}", "--out", "{tmp}", "--dupe-factor", "2000000000", "{text}"],
     "--dupe-factor must be between 1 and 1000"),
    (["data", "--vocab", "{vocab}", "--out", "{tmp}", "--dupe-factor", "4294967297", "{text}"],
     "--dupe-factor must be between 1 and 1000, got 4294967297"),
    (["data", "--vocab", "{vocab}", "--out", "{tmp}", "--max-seq-length", "4294967424", "{text}"],
     "--max-seq-length must be between"),
    (["data", "--vocab", "{vocab}", "--out", "{tmp}", "--threads", "1e3", "{text}"], "must be an integer"),
    (["tokenize", "--vocab", "{vocab}", "--input", "{dir}"], "is a directory"),
    (["tokenize", "--vocab", "{dir}", "--input", "{text}"], "is a directory"),
])
def test_command_line_and_paths(workspace, tmp_path, args, needle):
    values = {"dir": tmp_path, "vocab": workspace / "vocab.txt", "tmp": tmp_path / "out", "text": workspace / "short.txt"}
    proc = run([a.format(**values) for a in args], timeout=30)
    assert_one_line_error(proc, needle)
