"""Files and folders made read-only for the test's user, root included."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def read_only(*paths: Path) -> Iterator[None]:
    """chmod a-w; as root (who ignores modes) also the immutable attribute, which binds root too."""
    modes = {p: p.stat().st_mode for p in paths}
    immutable = os.geteuid() == 0
    if immutable and shutil.which("chattr") is None:
        pytest.skip("running as root without chattr: cannot make files read-only for this user")
    try:
        for p in paths:
            p.chmod(0o555 if p.is_dir() else 0o444)
        if immutable:
            subprocess.run(["chattr", "+i", *map(str, paths)], check=True)
        probe = paths[0] if paths[0].is_dir() else paths[0].parent
        with pytest.raises(OSError):
            (probe / "write-test").write_text("x")  # the folder really is read-only for us
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", *map(str, paths)], check=False)
        for p, mode in modes.items():
            p.chmod(mode)
