"""Packaging hook: ship the top-level ``adapters/`` library and ``benchmarks/data`` in the wheel.

The repository keeps adapters in the library layout at ``adapters/`` (easy to browse and to
point tools at); an installed package finds them at ``mellea_local/adapters/bundled/``. All other
metadata lives in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithAdapters(build_py):
    def run(self) -> None:
        super().run()
        source = Path(__file__).parent / "adapters"
        if source.is_dir() and not self.editable_mode:
            target = Path(self.build_lib) / "mellea_local" / "adapters" / "bundled"
            shutil.copytree(source, target, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("README.md"))
        data = Path(__file__).parent / "benchmarks" / "data"
        if data.is_dir() and not self.editable_mode:  # mellea_local/datasets.py reads it there
            shutil.copytree(data, Path(self.build_lib) / "mellea_local" / "bench" / "bundled_data",
                            dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithAdapters})
