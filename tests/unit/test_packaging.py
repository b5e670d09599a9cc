"""Every package folder ships: pyproject lists packages by name, so a new folder left off the list works in this
editable checkout and is missing from a wheel (kernelcast.app and graphs.route.routers once were)."""

from __future__ import annotations

import tomllib

from support.paths import ROOT


def test_every_package_folder_is_listed_in_pyproject() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: ROOT / path for name, path in setuptools["package-dir"].items()}
    found = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder)
            if "__pycache__" not in relative.parts:
                found.add(".".join((name, *relative.parts)))
    missing = sorted(found - set(setuptools["packages"]))
    assert not missing, f"add to [tool.setuptools] packages: {missing}"
