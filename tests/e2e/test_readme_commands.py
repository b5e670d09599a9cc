"""The README's shell commands run as written, and the generated task-file reference is current (issue 48, item 3).

Every command of a ```bash / ```sh block is either run here, in order, in a scratch folder (with the repository's
``examples`` linked in and the venv's ``bin`` on PATH), or skipped by one of the rules in :data:`SKIPS`, each with
its reason. A command whose comment says "exits N" must exit N; every other command must exit 0. ``RUN`` stands
for a run id: the id of one small run this module makes itself.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernelcast import task_docs

from support.paths import ROOT

README = ROOT / "README.md"
BIN = Path(sys.executable).parent

# (pattern on the command, after any VAR=value prefix; why it is not run here)
SKIPS: list[tuple[str, str]] = [
    (r"^make (run|test)$", "the two entry points: set up the venv, then a 24-measurement search or the whole suite"),
    (r"^\. \.venv/bin/activate$", "changes the caller's shell; the test puts the venv's bin on PATH instead"),
    (r"^kernelcast optimize\b", "spends a measurement budget (minutes); the module makes one small run for RUN"),
    (r"^kernelcast resume\b", "needs an interrupted run (resuming a finished run exits 2 by design)"),
    (r"^kernelcast dataset build\b", "measures a pool of candidates per task (tens of minutes)"),
    (r"^kernelcast measure (?!.*--sizes small)", "measures a built-in at its full size (minutes on a shared CPU)"),
    (r"^python -m llama_cpp\.server\b", "a server that runs until stopped, given a GGUF model file"),
]
RUNNABLE = re.compile(r"^(kernelcast|mkdir|cat)\b")  # what the README may show that this test runs


@dataclass(frozen=True)
class Command:
    text: str  # as written (a heredoc included)
    words: str  # the command itself: comments and any VAR=value prefix dropped
    expect: int  # the exit code its comment announces, else 0

    @property
    def skip(self) -> str | None:
        return next((why for pattern, why in SKIPS if re.search(pattern, self.words)), None)


def readme_commands(text: str) -> list[Command]:
    """The commands of the README's bash/sh blocks, a heredoc kept with the command that opens it."""
    commands = []
    for block in re.findall(r"^```(?:bash|sh)\n(.*?)^```", text, re.M | re.S):
        lines = block.splitlines()
        while lines:
            line = lines.pop(0)
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            full = line
            marker = re.search(r"<<'?(\w+)'?", line)
            if marker:
                end = lines.index(marker.group(1))
                full = "\n".join([line, *lines[:end + 1]])
                del lines[:end + 1]
            words = shlex.split(line, comments=True)
            while words and re.match(r"^[A-Z_]+=", words[0]):
                words.pop(0)
            exits = re.search(r"#.*\bexits (\d+)", line)
            commands.append(Command(full, shlex.join(words), int(exits.group(1)) if exits else 0))
    return commands


COMMANDS = readme_commands(README.read_text())


def test_readme_is_short_and_its_commands_are_covered() -> None:
    assert len(README.read_text().splitlines()) < 250
    makefile = (ROOT / "Makefile").read_text()
    assert "make run" in {c.words for c in COMMANDS} and "make test" in {c.words for c in COMMANDS}
    assert re.search(r"^run:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    unknown = [c.words for c in COMMANDS if c.skip is None and not RUNNABLE.match(c.words)]
    assert not unknown, f"README commands this test neither runs nor skips by a rule: {unknown}"
    unused = [pattern for pattern, _ in SKIPS if not any(re.search(pattern, c.words) for c in COMMANDS)]
    assert not unused, f"skip rules that match no README command any more: {unused}"
    assert sum(c.skip is None for c in COMMANDS) >= 12  # the cheap ones are the majority that runs


def test_readme_links_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)\)", README.read_text()):
        assert (ROOT / target).exists(), target


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("readme")
    (folder / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "KERNELCAST_HOME": str(folder / "home"), "COLUMNS": "200",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return {"folder": folder, "env": env, "run": None}


def run_id(workspace: dict[str, object]) -> str:
    """One small, real run (made once) whose id stands for RUN."""
    if workspace["run"] is None:
        out = subprocess.run([str(BIN / "kernelcast"), "optimize", "saxpy", "--budget", "3", "--sizes", "small"],
                             capture_output=True, text=True, env=workspace["env"], cwd=workspace["folder"], timeout=900)
        assert out.returncode == 0, out.stderr[-2000:]
        found = re.search(r"runs/(saxpy-[0-9]{8}-[0-9]{6}-[0-9a-f]+)", out.stdout)
        assert found, out.stdout[-2000:]
        workspace["run"] = found.group(1)
    return str(workspace["run"])


@pytest.mark.parametrize("command", COMMANDS, ids=[c.words[:60] for c in COMMANDS])
def test_readme_command_runs(command: Command, workspace: dict[str, object]) -> None:
    if command.skip:
        pytest.skip(command.skip)
    text = command.text
    if re.search(r"\bRUN\b", command.words):
        text = re.sub(r"\bRUN\b", run_id(workspace), text)
    out = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env=workspace["env"],
                         cwd=workspace["folder"], timeout=900)
    assert out.returncode == command.expect, f"{command.words}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert "Traceback" not in out.stderr


def test_task_format_doc_is_current() -> None:
    assert task_docs.DOC.read_text() == task_docs.document(), "run: python -m kernelcast.task_docs"


def test_task_format_doc_cannot_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field without a meaning (a field added to the schema) or a meaning without a field fails the render."""
    from kernelcast.tools.core.task import Tolerance

    meanings = dict(task_docs.MEANINGS)
    meanings[Tolerance] = {k: v for k, v in meanings[Tolerance].items() if k != "atol"}
    monkeypatch.setattr(task_docs, "MEANINGS", meanings)
    with pytest.raises(ValueError, match="atol"):
        task_docs.render()
    meanings[Tolerance] = {**task_docs.MEANINGS[Tolerance], "atol": "x", "gone": "y"}
    with pytest.raises(ValueError, match="gone"):
        task_docs.render()
