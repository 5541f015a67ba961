"""The HDF5 layouts seen from h5py, the library NVIDIA's loaders use:
- the committed reader fixtures (tests/golden/reader/) are exactly what scripts/make_reader_golden.py
  writes, so the C++ reader test checks files h5py wrote with the MLPerf keys, dtypes and shapes;
- shards written by `bertperf data` open in h5py with the exact keys, dtypes and shapes of NVIDIA's
  fixed-length and variable-length files, and hold the official generator's instances
  (tests/golden/create_data/). Skipped when the bertperf executable has not been built."""
import hashlib
import importlib.util
import json
import subprocess

import h5py
import numpy as np
import pytest

from bertperf_paths import REPO, find_binary

GOLDEN = REPO / "tests" / "golden"


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def datasets(path):
    with h5py.File(path, "r") as f:
        return {k: (f[k].dtype, h5py.check_vlen_dtype(f[k].dtype), f[k].shape,
                    [np.asarray(x).tolist() for x in f[k][:]]) for k in f}


def test_reader_fixtures_are_reproducible(tmp_path, monkeypatch):
    gen = load_script("make_reader_golden")
    monkeypatch.setattr(gen, "OUT", str(tmp_path))
    gen.main()
    for name in ["fixed.hdf5", "varlength.hdf5", "packed.hdf5"]:
        assert datasets(tmp_path / name) == datasets(GOLDEN / "reader" / name), name
    assert json.loads((tmp_path / "expected.json").read_text()) == json.loads((GOLDEN / "reader" / "expected.json").read_text())


def test_reader_fixtures_have_nvidia_dtypes():
    fixed = datasets(GOLDEN / "reader" / "fixed.hdf5")
    assert {k: (str(v[0]), len(v[2])) for k, v in fixed.items()} == {
        "input_ids": ("int16", 2), "input_mask": ("int8", 2), "segment_ids": ("int8", 2),
        "masked_lm_positions": ("int16", 2), "masked_lm_ids": ("int16", 2), "next_sentence_labels": ("int8", 1)}
    packed = datasets(GOLDEN / "reader" / "packed.hdf5")
    assert {k: str(v[1]) for k, v in packed.items()} == {
        "input_ids": "int16", "segment_ids": "int8", "packed_input_len": "int16", "masked_lm_positions": "int16",
        "masked_lm_ids": "int16", "packed_masked_lm_len": "int16", "next_sentence_labels": "int8"}


def bertperf_with_data():
    exe = find_binary("bertperf")
    if exe is None:
        return None
    probe = subprocess.run([str(exe), "data", "--help"], capture_output=True, text=True)
    return exe if probe.returncode == 0 else None


@pytest.mark.parametrize("layout", ["varlength", "fixed"])
def test_bertperf_data_output_in_h5py(tmp_path, layout):
    exe = bertperf_with_data()
    if exe is None:
        pytest.skip("bertperf with the data command is not built")
    golden = json.loads((GOLDEN / "create_data" / "instances_seq128_corpus_b.json").read_text())
    subprocess.run([str(exe), "data", "--vocab", str(GOLDEN / "create_data" / "vocab.txt"), "--out", str(tmp_path),
                    "--max-seq-length", "128", "--max-predictions", "20", "--dupe-factor", "5", "--layout", layout,
                    str(GOLDEN / "create_data" / "corpus_b.txt")], check=True, capture_output=True)
    rows = golden["rows"]
    n = len(rows)
    with h5py.File(tmp_path / "corpus_b.txt.hdf5", "r") as f:
        if layout == "varlength":
            assert sorted(f.keys()) == ["input_ids", "masked_lm_ids", "masked_lm_positions", "next_sentence_labels",
                                        "segment_ids"]
            for key, dtype in [("input_ids", "int16"), ("segment_ids", "int8"), ("masked_lm_positions", "int16"),
                               ("masked_lm_ids", "int16")]:
                assert h5py.check_vlen_dtype(f[key].dtype) == np.dtype(dtype) and f[key].shape == (n,), key
            ids = [x.tolist() for x in f["input_ids"][:]]
            seg = [x.tolist() for x in f["segment_ids"][:]]
            pos = [x.tolist() for x in f["masked_lm_positions"][:]]
            lab = [x.tolist() for x in f["masked_lm_ids"][:]]
        else:
            assert sorted(f.keys()) == ["input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions",
                                        "next_sentence_labels", "segment_ids"]
            for key, dtype, shape in [("input_ids", "int16", (n, 128)), ("input_mask", "int8", (n, 128)),
                                      ("segment_ids", "int8", (n, 128)), ("masked_lm_positions", "int16", (n, 20)),
                                      ("masked_lm_ids", "int16", (n, 20))]:
                assert (f[key].dtype, f[key].shape) == (np.dtype(dtype), shape), key
            lengths = f["input_mask"][:].sum(axis=1)
            ids = [r[:k].tolist() for r, k in zip(f["input_ids"][:], lengths)]
            seg = [r[:k].tolist() for r, k in zip(f["segment_ids"][:], lengths)]
            counts = (f["masked_lm_positions"][:] != 0).sum(axis=1)
            pos = [r[:k].tolist() for r, k in zip(f["masked_lm_positions"][:], counts)]
            lab = [r[:k].tolist() for r, k in zip(f["masked_lm_ids"][:], counts)]
        assert f["next_sentence_labels"].dtype == np.int8 and f["next_sentence_labels"].shape == (n,)
        nsp = f["next_sentence_labels"][:].tolist()
    # `bertperf data --checksum` equals NVIDIA's hdf5_md5.py method computed here.
    with h5py.File(tmp_path / "corpus_b.txt.hdf5", "r") as f:
        digests = [hashlib.md5(str(np.asarray(row).tolist()).encode("utf-8")).hexdigest() for row in f["input_ids"][:]]
    expect = hashlib.md5(str(digests).encode("utf-8")).hexdigest()
    out = subprocess.run([str(exe), "data", "--checksum", str(tmp_path / "corpus_b.txt.hdf5")], check=True,
                         capture_output=True, text=True).stdout
    assert out == "corpus_b.txt.hdf5\t%s\n" % expect
    for i, r in enumerate(rows):
        assert ids[i] == r[0], i
        assert seg[i] == [0] * r[1] + [1] * (len(r[0]) - r[1]), i
        assert (pos[i], lab[i], nsp[i]) == (r[2], r[3], r[4]), i
