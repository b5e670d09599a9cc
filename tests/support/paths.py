"""Where the repository's files are, for tests that read its kernels, examples and docs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "bench" / "kernels"
EXAMPLES = ROOT / "examples"
