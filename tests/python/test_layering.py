"""The layer rules of implementations/, from their one copy (implementations/layers.json): every source file, in
every sub-folder, includes only what its layer may include (project folders, and the libraries only some layers may
know: OpenBLAS, OpenMP and oneDNN in backends/cpu, CUDA in backends/cuda, the CUDA runtime also in the GPU runtime
layer gpu/, NCCL in gpu/nccl_*), and calls a library's functions (cudaMalloc, ncclAllReduce, MPI_Allreduce) only
where it may include its headers; the tests and speed programs (the rules' clients) include only what the library they
link holds; the rules are well formed; the table in implementations/README.md says what they say; CMake refuses an
include and a link they do not allow. The checks are themselves checked: violations planted in a copy of the tree are
each caught."""
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
CLIENT_FOLDERS = ("tests", "speed", "benchmarks")
SUFFIXES = {".h", ".hpp", ".cpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+(\w+)", re.M)
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


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


def calls(text):
    """The names called in `text`, comments and string literals left out."""
    return set(CALL.findall(COMMENT_OR_STRING.sub(" ", text)))


def external_uses(rel, text, rules, allowed):
    """Every use in `text` (the file `rel`) of an external library's headers, pragmas or calls where allowed(rule)
    is false, one line each."""
    found = []
    for quote, header in INCLUDE.findall(text):
        rule = external_rule(header, rules)
        if rule and not allowed(rule):
            found.append(f"{rel} includes {header}: {rule['name']} only in {rule['only_in']}")
    for pragma in PRAGMA.findall(text):
        for rule in rules["external"]:
            if pragma in rule.get("pragmas", []) and not allowed(rule):
                found.append(f"{rel} uses #pragma {pragma}: {rule['name']} only in {rule['only_in']}")
    for name in sorted(calls(text)):
        for rule in rules["external"]:
            if any(fnmatch.fnmatchcase(name, p) for p in rule.get("calls", [])) and not allowed(rule):
                found.append(f"{rel} calls {name}: {rule['name']} only in {rule['only_in']}")
    return found


def reachable(library, rules):
    """The folders a file linking `library` may include: the library's folders and what they may include, in turn."""
    layers = rules["layers"]
    todo = [layer["folder"] for layer in layers if layer["library"] == library]
    seen = set()
    while todo:
        folder = todo.pop()
        if folder not in seen:
            seen.add(folder)
            todo.extend(next(layer for layer in layers if layer["folder"] == folder)["may_include"])
    return seen


def client_entry(rel, rules):
    """The first entry of 'clients' whose files match `rel` (a path under the repository), or None."""
    for entry in rules["clients"]:
        if any(fnmatch.fnmatch(rel, pattern) for pattern in entry["files"]):
            return entry
    return None


def project_includes(root, path, text, folders):
    """The project files `path` includes, as (header as written, path under `root`)."""
    for quote, header in INCLUDE.findall(text):
        target = project_file(root, path, quote, header, folders)
        if target is not None:
            yield header, target


def sources(root):
    return sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file())


def violations(root, rules):
    """Every break of `rules` in the source tree `root` (implementations/), one line each."""
    layers = {layer["folder"]: layer for layer in rules["layers"]}
    found = []
    for path in sources(root):
        rel = path.relative_to(root).as_posix()
        mine = layer_of(rel, layers)
        if mine is None:
            found.append(f"{rel}: in no layer of layers.json")
            continue
        allowed = {mine, *layers[mine]["may_include"]}
        text = path.read_text(errors="replace")
        for header, target in project_includes(root, path, text, layers):
            theirs = layer_of(target, layers)
            if theirs not in allowed:
                found.append(f"{rel} (layer {mine}) includes {header} (layer {theirs}); "
                             f"{mine} may include {sorted(allowed)}")
        found += external_uses(rel, text, rules,
                               lambda rule: any(fnmatch.fnmatch(rel, where) for where in rule["only_in"]))
    return found


def client_violations(repo, rules):
    """Every break of `rules` by the clients under `repo` (tests/, speed/), one line each."""
    layers = {layer["folder"]: layer for layer in rules["layers"]}
    found = []
    for folder in CLIENT_FOLDERS:
        for path in sources(repo / folder):
            rel = path.relative_to(repo).as_posix()
            entry = client_entry(rel, rules)
            if entry is None:
                found.append(f"{rel}: in no client entry of layers.json")
                continue
            allowed = reachable(entry["library"], rules)
            text = path.read_text(errors="replace")
            for quote, header in INCLUDE.findall(text):
                if header.split("/")[0] not in {f.split("/")[0] for f in layers}:
                    continue
                theirs = layer_of(header, layers)
                if theirs not in allowed:
                    found.append(f"{rel} (links {entry['library']}) includes {header} (layer {theirs}); "
                                 f"it may include {sorted(allowed)}")
            uses = set(entry.get("uses", []))
            found += external_uses(rel, text, rules, lambda rule: rule["name"] in uses)
    return found


def test_every_file_keeps_the_layer_rules():
    found = violations(SOURCES, load_rules())
    assert not found, "layer rules broken (implementations/layers.json):\n" + "\n".join(found)


def test_every_test_and_benchmark_keeps_the_rules():
    found = client_violations(REPO, load_rules())
    assert not found, "layer rules broken by a client (implementations/layers.json):\n" + "\n".join(found)


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
                                                         '#include "registry/registry.h"\n'
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
    "model calls the CUDA runtime": ("model/planted.cpp", "void f(void** p) { cudaMalloc(p, 16); }\n"),
    "comm calls NCCL outside the GPU layer": ("comm/planted.cpp", "int f() { return ncclGroupStart(); }\n"),
    "harness calls MPI": ("harness/planted.cpp", "void f() { MPI_Barrier(0); }\n"),
    "the CUDA backend calls NCCL": ("backends/cuda/planted.cpp", "void f() { ncclGroupEnd (); }\n"),
}

# A call named only in a comment or a string is no call.
NOT_CALLS = "// cudaMalloc(p, n) is the GPU layer's\nconst char* s = \"ncclAllReduce(\";\n/* MPI_Init(0, 0) */\n"

# Clients (tests, speed programs): what each plants, under a copy of the repository holding only it.
PLANTED_CLIENTS = {
    "a core test includes the harness": ("tests/cpp/test_core.cpp", '#include "harness/train_step.h"\n'),
    "a data test includes the model": ("tests/cpp/test_reader.cpp", '#include "model/bert.h"\n'),
    "a test includes NCCL": ("tests/cpp/test_planted.cpp", "#include <nccl.h>\n"),
    "a test calls the CUDA runtime": ("tests/cpp/test_planted.cpp", "void f(void** p) { cudaMalloc(p, 16); }\n"),
    "a speed program uses OpenMP unlisted": ("speed/micro/bench_planted.cpp", "#include <omp.h>\n"),
    "a file in no client entry": ("tests/other/planted.cpp", "int x;\n"),
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


def test_a_call_in_a_comment_or_a_string_is_not_caught(tree_copy):
    planted = tree_copy / "model" / "planted.cpp"
    planted.write_text(NOT_CALLS)
    try:
        assert violations(tree_copy, load_rules()) == []
    finally:
        planted.unlink()


@pytest.mark.parametrize("case", sorted(PLANTED_CLIENTS))
def test_a_planted_client_violation_is_caught(tmp_path, case):
    name, text = PLANTED_CLIENTS[case]
    (tmp_path / name).parent.mkdir(parents=True)
    (tmp_path / name).write_text(text)
    found = client_violations(tmp_path, load_rules())
    assert len(found) == 1 and found[0].startswith(name), f"{case}: {found}"


def test_a_client_may_use_what_its_entry_lists(tmp_path):
    """The same includes as the planted ones, where the entries allow them, are no violation."""
    for name, text in {"tests/cpp/test_harness_x.cpp": '#include "harness/train_step.h"\n',
                       "tests/cpp/test_ops.cpp": "#include <omp.h>\n#include <cblas.h>\n",
                       "speed/dist/bench_x.cpp": "#include <mpi.h>\nvoid f() { MPI_Barrier(0); }\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert client_violations(tmp_path, load_rules()) == []


def configure_copy(tmp_path, edit):
    """Configures a copy of the build (sources, CMake files, layers.json) after `edit(source)` has changed it."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("no cmake here")
    source = tmp_path / "src"
    source.mkdir(parents=True)
    for part in ("CMakeLists.txt", "cmake", "implementations"):
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy)(REPO / part, source / part)
    edit(source)
    return subprocess.run([cmake, "-S", str(source), "-B", str(tmp_path / "build"), "-DBERTPERF_WITH_CUDA=OFF",
                           "-DBERTPERF_WITH_NCCL=OFF", "-DBERTPERF_WITH_MPI=OFF", "-DBERTPERF_BUILD_TESTS=OFF",
                           "-DBERTPERF_BUILD_BENCHMARKS=OFF"], capture_output=True, text=True, timeout=300)


def test_cmake_refuses_a_link_the_rules_do_not_allow(tmp_path):
    """A copy of the build where the model's library links comm's, which no model file may include: configuring
    fails, naming the link."""
    def plant(source):
        cmake_lists = source / "CMakeLists.txt"
        cmake_lists.write_text(cmake_lists.read_text().replace(
            "bertperf_check_layer_links()", "target_link_libraries(bertperf_model PUBLIC bertperf_comm)\n"
            "bertperf_check_layer_links()"))
    proc = configure_copy(tmp_path, plant)
    assert proc.returncode != 0, proc.stdout
    assert "bertperf_model links bertperf_comm" in proc.stderr, proc.stderr


def test_cmake_refuses_an_include_the_rules_do_not_allow(tmp_path):
    """A copy of the build where a model file includes the harness: configuring fails, naming the file and the
    include (the model's library links no harness, and CMake sees the file, not only the libraries)."""
    def plant(source):
        bert = source / "implementations" / "model" / "bert.cpp"
        bert.write_text('#include "harness/train_step.h"\n' + bert.read_text())
    proc = configure_copy(tmp_path, plant)
    assert proc.returncode != 0, proc.stdout
    assert "implementations/model/bert.cpp (layer model) includes harness/train_step.h" in proc.stderr, proc.stderr
    assert configure_copy(tmp_path / "clean", lambda source: None).returncode == 0


# ---- adding a backend: what the README's section lists, every backend folder has -------------------------------

def backend_folders(rules):
    return [layer["folder"] for layer in rules["layers"] if layer["folder"].startswith("backends/")]


def test_every_backend_registers_itself_as_the_readme_says():
    """Each backend folder exports its registration (backends/NAME/NAME_entry.h), the registry adds it in one line
    and may include it, and no other file names it: the files the README's "Adding a backend" lists are all a backend
    touches."""
    rules = load_rules()
    section = (SOURCES / "README.md").read_text().split("## Adding a backend", 1)[1].split("\n## ", 1)[0]
    for named in ("`backends/NAME/`", "`backends/NAME/NAME_entry.h`", "`registry/registry.cpp`",
                  "`implementations/layers.json`", "`CMakeLists.txt`"):
        assert named in section, f"the README's 'Adding a backend' does not list {named}"
    registry = next(layer for layer in rules["layers"] if layer["folder"] == "registry")
    registry_cpp = (SOURCES / "registry" / "registry.cpp").read_text()
    every_source = [(p, p.read_text(errors="replace"))
                    for root in (SOURCES, *(REPO / f for f in CLIENT_FOLDERS)) for p in sources(root)]
    folders = backend_folders(rules)
    assert folders, "no backend folder in layers.json"
    for folder in folders:
        name = folder.split("/", 1)[1]
        entry = SOURCES / folder / f"{name}_entry.h"
        assert entry.is_file(), f"{folder} exports no registration ({entry.relative_to(REPO)})"
        functions = set(re.findall(rf"\b({name}_entr(?:y|ies))\s*\(", entry.read_text()))
        assert functions, f"{entry.relative_to(REPO)} declares no {name}_entry() or {name}_entries()"
        assert f'#include "{folder}/{name}_entry.h"' in registry_cpp, f"registry.cpp does not include {folder}'s entry"
        assert any(f"{f}()" in registry_cpp for f in functions), f"registry.cpp does not add {folder}'s entries"
        assert folder in registry["may_include"], f"layers.json: registry may not include {folder}"
        for path, text in every_source:
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(f"implementations/{folder}/") or rel == "implementations/registry/registry.cpp":
                continue
            for f in functions:
                assert not re.search(rf"\b{f}\s*\(", text), f"{rel} names {f}: only the registry may"


def test_the_backend_interface_includes_no_backend():
    """No include runs back up inside backends/: the interface may include core only, the registry above them."""
    rules = load_rules()
    interface = next(layer for layer in rules["layers"] if layer["folder"] == "backends")
    assert not set(interface["may_include"]) & set(backend_folders(rules)), interface["may_include"]
