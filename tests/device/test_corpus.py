"""The corpus of public kernels (bench/corpus, issue 46): upstream verbatim, a numpy oracle per kernel that agrees
with the reference kernel on the real OpenCL device, and the split by suite enforced: nothing the model side ships
(seed pairs, seed replay rows, probes, the prior's sources) comes from a held-out suite.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelcast.tools.core.candidate import canonical_source
from kernelcast.tools.core.task import BufferArg, Task, builtin_task_paths, load_task
from kernelcast.tools.hardware.harness import buffer_count, make_inputs, scalar_values
from kernelcast.tools.hardware.worker import MeasurementWorker

from support.paths import ROOT

CORPUS = ROOT / "bench" / "corpus"
sys.path.insert(0, str(CORPUS))

from oracles import ORACLES  # noqa: E402

MANIFEST = tomllib.loads((CORPUS / "manifest.toml").read_text())
SUITES: dict[str, dict[str, Any]] = MANIFEST["suites"]
KERNELS: list[dict[str, Any]] = MANIFEST["kernels"]
NAMES = [k["task"] for k in KERNELS]
HELD_OUT = [k for k in KERNELS if SUITES[k["suite"]]["split"] == "held-out"]
DATA = ROOT / "agents" / "data"
SEEDS = (0, 1)


def _task(name: str) -> Task:
    kernel = next(k for k in KERNELS if k["task"] == name)
    return load_task(CORPUS / kernel["folder"] / "task.toml")


TASKS = {name: _task(name) for name in NAMES}


# ---- the manifest, provenance and the tasks (no device) ---------------------------------------------------
def test_corpus_size_and_suites() -> None:
    assert len(KERNELS) >= 24 and len(set(NAMES)) == len(NAMES)
    assert len({k["suite"] for k in KERNELS}) >= 4
    splits = {s["split"] for s in SUITES.values()}
    assert splits == {"training", "held-out"}, "a split needs suites on both sides"
    for kernel in KERNELS:
        assert kernel["suite"] in SUITES
        assert kernel["split"] == SUITES[kernel["suite"]]["split"], f"{kernel['task']}: the split is by suite"
    for name, suite in SUITES.items():
        assert not re.search(r"polybench|kernel.?tuner", name + suite["title"] + suite["repository"], re.I), \
            "PolyBench/GPU and Kernel Tuner's examples are outside checks, not corpus suites"
        assert re.fullmatch(r"[0-9a-f]{40}", suite["commit"]) and suite["repository"].startswith("https://github.com/")
        assert suite["license"]
        assert list((CORPUS / "LICENSES").glob(f"{name}.*")), f"{name}: its license text is kept beside the kernels"
    folders = {str(p.parent.relative_to(CORPUS)) for p in CORPUS.glob("*/*/task.toml")}
    assert folders == {k["folder"] for k in KERNELS}, "every task folder is in the manifest and vice versa"
    assert set(ORACLES) == set(NAMES), "one numpy oracle per corpus task"
    assert not set(NAMES) & set(builtin_task_paths()), "corpus names must not shadow built-in tasks"


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("name", NAMES)
def test_kernel_is_upstream_verbatim(name: str) -> None:
    kernel = next(k for k in KERNELS if k["task"] == name)
    folder = CORPUS / kernel["folder"]
    source = folder / kernel["file"]
    assert _git_blob(source.read_bytes()) == kernel["blob"], f"{source} differs from the upstream file"
    assert Path(kernel["upstream_path"]).name == kernel["file"]
    task = TASKS[name]
    assert task.name == name and task.spec.source == kernel["file"] and task.spec.entry == kernel["entry"]
    assert [p.name for p in folder.iterdir() if p.is_file()] and {p.name for p in folder.iterdir()} == \
        {"task.toml", kernel["file"]}, "a task folder holds the upstream file and its task file, nothing else"


@pytest.mark.parametrize("name", NAMES)
def test_task_sizes_suit_a_small_cpu(name: str) -> None:
    task = TASKS[name]
    spec = task.spec
    assert spec.description and spec.tags and spec.small_sizes is not None
    full, small = task.sizes("full"), task.sizes("small")

    def total(sizes: dict[str, int]) -> int:
        return sum(buffer_count(a, sizes) * np.dtype(a.dtype).itemsize for a in spec.args if isinstance(a, BufferArg))

    assert total(full) <= 512 * 2**20 and total(small) <= 4 * 2**20
    assert total(small) <= total(full) and any(small[k] < full[k] for k in full), "small sizes are smaller"
    assert max(buffer_count(a, full) for a in spec.args if isinstance(a, BufferArg)) < 2**31


# ---- the split ----------------------------------------------------------------------------------------------
def _held_out_marks() -> tuple[set[str], set[str], set[str], list[re.Pattern[str]]]:
    names = {k["task"] for k in HELD_OUT}
    prints = {TASKS[n].fingerprint for n in names}
    sources = {canonical_source(TASKS[n].source) for n in names}
    entries = [re.compile(rf"\b{re.escape(k['entry'])}\s*\(") for k in HELD_OUT]
    return names, prints, sources, entries


def _squeezed(source: str) -> str:
    return re.sub(r"\s+", " ", source).strip()


def test_no_seed_pair_comes_from_a_held_out_suite() -> None:
    names, prints, _, entries = _held_out_marks()
    texts = {_squeezed(TASKS[n].source) for n in names}
    rows = [json.loads(line) for line in gzip.open(DATA / "seed_pairs.jsonl.gz", "rt")]
    assert rows, "the seed dataset is empty: nothing was checked"
    for row in rows:
        cand, meas = row["candidate"], row["measurement"]
        assert cand["task"] not in names and meas["task"] not in names
        assert meas.get("task_fingerprint") not in prints
        assert not any(t in _squeezed(cand["source"]) for t in texts), f"a seed pair of {cand['task']} holds a " \
            "held-out kernel's file"
        found = [p.pattern for p in entries if p.search(cand["source"])]
        assert not found, f"a seed pair of {cand['task']} defines a held-out kernel's entry {found}"


def test_no_replay_row_comes_from_a_held_out_suite() -> None:
    names = {k["task"] for k in HELD_OUT}
    rows = [json.loads(line) for line in gzip.open(DATA / "seed_replay.jsonl.gz", "rt")]
    assert rows
    groups = {row["group"].split("@", 1)[0] for row in rows if row["mode"] == "task"}
    assert groups and not groups & names


def test_no_probe_or_prior_source_comes_from_a_held_out_suite() -> None:
    """The prior's constants come from the probes in agents/data/probes and the built-ins; neither may be a
    held-out kernel, and no model-side file may name a held-out suite or kernel (a constant fitted on one would
    say where it came from)."""
    names, prints, sources, entries = _held_out_marks()
    probes = list((DATA / "probes").glob("*/task.toml"))
    assert probes
    for probe in probes:  # read as files: a probe's template need not be a valid user task
        assert tomllib.loads(probe.read_text())["name"] not in names
        for kernel in probe.parent.glob("*.cl"):
            assert canonical_source(kernel.read_text()) not in sources, f"{kernel} is a held-out kernel"
    for task in [load_task(p) for p in builtin_task_paths().values()]:
        assert task.name not in names and task.fingerprint not in prints
        assert canonical_source(task.source, task.language) not in sources
    suites = [s for s, d in SUITES.items() if d["split"] == "held-out"]
    words = re.compile("|".join([*(re.escape(n) for n in names), *(re.escape(s) for s in suites), "hetero-mark"]),
                       re.I)
    checked = 0
    for package in ("agents", "graphs", "tools"):
        for path in (ROOT / package).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".toml", ".cl", ".json", ".md", ".txt", ".cu"):
                text = path.read_text(errors="replace")
                checked += 1
                assert not words.search(text), f"{path} names a held-out suite or kernel"
                assert not [p.pattern for p in entries if p.search(text) and path.suffix in (".cl", ".cu")]
    assert checked > 50


# ---- the reference kernels against numpy, on the device -------------------------------------------------------
@pytest.fixture(scope="module")
def worker() -> Iterator[MeasurementWorker]:
    try:
        w = MeasurementWorker()
        w.start()
    except Exception as exc:  # noqa: BLE001 - no OpenCL device on this machine
        pytest.skip(f"no OpenCL device: {exc}")
    with w:
        yield w


def _compare(task: Task, got: dict[str, Any], expected: dict[str, np.ndarray]) -> list[str]:
    tol = task.spec.tolerance
    problems = []
    if set(got) != set(expected):
        return [f"outputs {sorted(got)} != oracle outputs {sorted(expected)}"]
    for name, ref in expected.items():
        out = np.asarray(got[name])
        if out.dtype != ref.dtype or out.shape != ref.shape:
            problems.append(f"{name} is {out.dtype}{out.shape}, the oracle's {ref.dtype}{ref.shape}")
            continue
        if np.issubdtype(ref.dtype, np.floating):
            bad = ~np.isclose(out, ref, rtol=tol.rtol, atol=tol.atol) | ~np.isfinite(out)
        else:
            bad = out != ref
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            problems.append(f"{int(bad.sum())}/{ref.size} values of {name} differ (first at {i}: got {out[i]}, "
                            f"numpy {ref[i]}; rtol={tol.rtol}, atol={tol.atol})")
    return problems


def test_reference_kernels_match_their_oracles(worker: MeasurementWorker) -> None:
    """Every corpus kernel at its small sizes on two seeds (one test, one worker: the whole corpus in ~30 s)."""
    failures = []
    for name, task in TASKS.items():
        sizes = task.sizes("small")
        previous = None
        for seed in SEEDS:
            outputs, problems = worker.outputs(task, task.reference(), "small", seed)
            if problems:
                failures.append(f"{name} seed {seed}: {problems}")
                break
            inputs = make_inputs(task, sizes, seed)
            expected = ORACLES[name](inputs, scalar_values(task, sizes), sizes)
            failures += [f"{name} seed {seed}: {p}" for p in _compare(task, outputs, expected)]
            # the kernel wrote something: an inout buffer changed (an out buffer is poisoned before the launch)
            inout = [a.name for a in task.spec.args if isinstance(a, BufferArg) and a.direction == "inout"]
            if inout and all(np.array_equal(np.asarray(outputs[k]), inputs[k]) for k in inout) and \
                    all(a.direction != "out" for a in task.spec.args if isinstance(a, BufferArg)):
                failures.append(f"{name} seed {seed}: the kernel left its inout buffers unchanged")
            random = any(a.init not in ("zeros", "ones", "arange") for a in task.spec.args
                         if isinstance(a, BufferArg) and a.direction != "out")
            if previous is not None and random and all(np.array_equal(previous[k], outputs[k]) for k in outputs):
                failures.append(f"{name}: seeds {SEEDS} gave the same outputs: the comparison is vacuous")
            previous = {k: np.asarray(v) for k, v in outputs.items()}
    assert not failures, "\n".join(failures)


def test_oracle_comparison_rejects_a_wrong_answer(worker: MeasurementWorker) -> None:
    """The comparison above fails on plausible mistakes: a float output off by one ulp-scale step past the
    tolerance, an integer output off by one."""
    for name, key in (("parboil_sgemm_base", "C"), ("rodinia_kmeans_assign", "membership")):
        task = TASKS[name]
        sizes = task.sizes("small")
        outputs, problems = worker.outputs(task, task.reference(), "small", 0)
        assert problems == []
        expected = ORACLES[name](make_inputs(task, sizes, 0), scalar_values(task, sizes), sizes)
        assert _compare(task, outputs, expected) == []
        wrong = dict(outputs)
        wrong[key] = np.asarray(outputs[key]).copy()
        wrong[key][3] += 1 if np.issubdtype(wrong[key].dtype, np.integer) else 0.01
        assert _compare(task, wrong, expected), f"{name}: a changed {key} passed"


def test_md5_oracle_finds_the_key() -> None:
    """The md5hash task's digest is that of key 2748 (0xABC: bytes 12, 11, 10), inside both key spaces."""
    task = TASKS["shoc_md5hash"]
    for which in ("small", "full"):
        sizes = task.sizes(which)  # type: ignore[arg-type]
        if which == "full":
            sizes = dict(sizes, K=4096)  # the same search over the small space's keys: seconds, not minutes
        inputs = {"foundIndex": np.zeros(1, np.int32), "foundKey": np.zeros(8, np.uint8),
                  "foundDigest": np.zeros(4, np.uint32)}
        found = ORACLES["shoc_md5hash"](inputs, scalar_values(task, task.sizes(which)), sizes)  # type: ignore[arg-type]
        assert found["foundIndex"][0] == 2748 and list(found["foundKey"][:3]) == [12, 11, 10]
