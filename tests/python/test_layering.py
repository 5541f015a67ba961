"""The layer rules of implementations/, from their one copy (implementations/layers.json): every source file, in
every sub-folder, includes only what its layer may include (project folders, and the libraries only some layers may
know: OpenBLAS, OpenMP and oneDNN in backends/cpu, CUDA in backends/cuda, the CUDA runtime also in the GPU runtime
layer gpu/, NCCL in gpu/nccl_*);
the rules are well formed; the table in implementations/README.md says what they say; CMake refuses a link they do
not allow. The checks are themselves checked: violations planted in a copy of the tree are each caught."""
import fnmatch
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bertperf_paths import REPO

SOURCES = REPO / "implementations"
RULES = SOURCES / "layers.json"
SUFFIXES = {".h", ".hpp", ".cpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+(\w+)", re.M)


def load_rules(path=RULES):
    return json.loads(path.read_text())


def layer_of(relative, folders):
    """The longest listed folder that holds `relative` (a path under implementations/), or None."""
    holding = [f for f in folders if relative.startswith(f + "/")]
    return max(holding, key=len) if holding else None


def project_file(root, including, quote, header, folders):
    """The path under `root` that an include names, or None for a header from outside the project: a quoted include
    of a file beside the including one, or any include whose first part is a project folder."""
    if quote == '"':
        beside = (including.parent / header).resolve()
        if beside.is_file() and beside.is_relative_to(root.resolve()):
            return beside.relative_to(root.resolve()).as_posix()
    top = {f.split("/")[0] for f in folders}
    return header if header.split("/")[0] in top else None


def external_rule(header, rules):
    """The first rule in 'external' whose headers match `header`, or None."""
    for rule in rules["external"]:
        if any(fnmatch.fnmatch(header, pattern) for pattern in rule.get("headers", [])):
            return rule
    return None


def violations(root, rules):
    """Every break of `rules` in the source tree `root`, one line each."""
    layers = {layer["folder"]: layer for layer in rules["layers"]}
    found = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file()):
        rel = path.relative_to(root).as_posix()
        mine = layer_of(rel, layers)
        if mine is None:
            found.append(f"{rel}: in no layer of layers.json")
            continue
        allowed = {mine, *layers[mine]["may_include"]}
        text = path.read_text(errors="replace")
        for quote, header in INCLUDE.findall(text):
            target = project_file(root, path, quote, header, layers)
            if target is not None:
                theirs = layer_of(target, layers)
                if theirs not in allowed:
                    found.append(f"{rel} (layer {mine}) includes {header} (layer {theirs}); "
                                 f"{mine} may include {sorted(allowed)}")
                continue
            rule = external_rule(header, rules)
            if rule and not any(fnmatch.fnmatch(rel, where) for where in rule["only_in"]):
                found.append(f"{rel} includes {header}: {rule['name']} only in {rule['only_in']}")
        for pragma in PRAGMA.findall(text):
            for rule in rules["external"]:
                if pragma in rule.get("pragmas", []) and not any(fnmatch.fnmatch(rel, w) for w in rule["only_in"]):
                    found.append(f"{rel} uses #pragma {pragma}: {rule['name']} only in {rule['only_in']}")
    return found


def test_every_file_keeps_the_layer_rules():
    found = violations(SOURCES, load_rules())
    assert not found, "layer rules broken (implementations/layers.json):\n" + "\n".join(found)


def test_the_rules_are_well_formed():
    layers = load_rules()["layers"]
    folders = [layer["folder"] for layer in layers]
    assert len(set(folders)) == len(folders), "a folder listed twice"
    for i, layer in enumerate(layers):
        for other in layer["may_include"]:
            assert other in folders, f"{layer['folder']} may include {other}, which is no layer"
            # In order: a layer includes layers listed before it, and its own sub-folders.
            assert folders.index(other) < i or other.startswith(layer["folder"] + "/"), \
                f"{layer['folder']} may include {other}, listed after it"
    for path in SOURCES.iterdir():
        if path.is_dir():
            assert path.name in folders, f"implementations/{path.name} is in no layer"


def readme_table(readme):
    """The rows of the layer table in implementations/README.md: (folders, libraries, may include), each the set of
    `code` names in its column."""
    rows = []
    section = readme.split("## The layers", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    columns = {name: header.index(name) for name in ("layer", "library", "may include")}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        names = {name: {n.rstrip("/") for n in re.findall(r"`([^`]+)`", cells[i])} for name, i in columns.items()}
        rows.append((names["layer"], names["library"], names["may include"]))
    return rows


def test_the_readme_table_says_what_the_rules_say():
    rules = {layer["folder"]: layer for layer in load_rules()["layers"]}
    rows = readme_table((SOURCES / "README.md").read_text())
    seen = set()
    for folders, libraries, may_include in rows:
        for folder in folders:
            assert folder in rules, f"README: {folder} is in no layer of layers.json"
            assert libraries == {rules[folder]["library"]}, f"README: the library of {folder}"
            assert may_include == set(rules[folder]["may_include"]), f"README: what {folder} may include"
            seen.add(folder)
    assert seen == set(rules), f"README: no row for {sorted(set(rules) - seen)}"


# ---- the checks catch what they should ------------------------------------------------------------------------

PLANTED = {
    "model includes the CPU backend": ("model/planted.h", '#include "backends/cpu/cpu_backend.h"\n'),
    "comm includes the CUDA backend": ("comm/planted.cpp", '#include "backends/cuda/cuda_context.h"\n'),
    "core includes the harness (upward)": ("core/planted.h", '#include "harness/train_step.h"\n'),
    "a sub-folder of harness includes the CUDA backend": ("harness/sub/planted.h",
                                                          '#include "backends/cuda/linear.h"\n'),
    "cli includes the CPU backend beside the registry": ("cli/planted.cpp",
                                                         '#include "backends/registry.h"\n'
                                                         '#include "backends/cpu/cpu_options.h"\n'),
    "data uses OpenBLAS": ("data/planted.cpp", "#include <cblas.h>\n"),
    "optim uses OpenMP": ("optim/planted.cpp", "void f() {\n#pragma omp parallel for\n  for (;;) {}\n}\n"),
    "model uses the CUDA runtime": ("model/planted.cpp", "#include <cuda_runtime.h>\n"),
    "comm uses NCCL outside nccl_*": ("comm/reducer_planted.cpp", "#include <nccl.h>\n"),
    "the NCCL transport includes NCCL itself": ("comm/nccl_planted.cpp", "#include <nccl.h>\n"),
    "comm includes the CUDA runtime, not the GPU layer": ("comm/planted.cpp", "#include <cuda_runtime.h>\n"),
    "the GPU layer includes cuBLAS": ("gpu/planted.cpp", "#include <cublasLt.h>\n"),
    "the backend interface includes the GPU layer": ("backends/planted.h", '#include "gpu/runtime.h"\n'),
    "harness uses MPI": ("harness/planted.cpp", "#include <mpi.h>\n"),
    "a folder in no layer": ("extra/planted.h", "#pragma once\n"),
}


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory):
    copy = tmp_path_factory.mktemp("layers") / "implementations"
    shutil.copytree(SOURCES, copy)
    return copy


def test_a_copy_of_the_tree_keeps_the_rules(tree_copy):
    assert violations(tree_copy, load_rules()) == []


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_violation_is_caught(tree_copy, case):
    name, text = PLANTED[case]
    planted = tree_copy / name
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(text)
    try:
        found = violations(tree_copy, load_rules())
    finally:
        planted.unlink()
    assert [line for line in found if line.startswith(name)], f"{case}: not caught; found {found}"
    assert all(line.startswith(name) for line in found), found  # nothing else


def test_cmake_refuses_a_link_the_rules_do_not_allow(tmp_path):
    """A copy of the build whose rules no longer let the harness include comm/: configuring fails, naming the link."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("no cmake here")
    source = tmp_path / "src"
    source.mkdir()
    for part in ("CMakeLists.txt", "cmake", "implementations"):
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy)(REPO / part, source / part)
    rules = load_rules()
    for layer in rules["layers"]:
        if layer["folder"] == "harness":
            layer["may_include"].remove("comm")
    (source / "implementations" / "layers.json").write_text(json.dumps(rules))
    proc = subprocess.run([cmake, "-S", str(source), "-B", str(tmp_path / "build"), "-DBERTPERF_WITH_CUDA=OFF",
                           "-DBERTPERF_WITH_MPI=OFF", "-DBERTPERF_BUILD_TESTS=OFF", "-DBERTPERF_BUILD_BENCHMARKS=OFF"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout
    assert "bertperf links bertperf_comm" in proc.stderr, proc.stderr
