"""Build hook: the wheel carries the repository's top-level sql/ and migrations/ folders as
pgmemory/_sql and pgmemory/_migrations (pgmemory.storage.migrate reads them from there when
installed, and from the repository in a source checkout). Everything else is in pyproject.toml."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = {"sql": "_sql", "migrations": "_migrations"}


class BuildPyWithSQL(build_py):
    """build_py, then copy the SQL folders into the built package."""

    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for source, packaged in SHIPPED.items():
            target = Path(self.build_lib) / "pgmemory" / packaged
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(root / source, target, ignore=shutil.ignore_patterns("*.pyc", "__pycache__"))


setup(cmdclass={"build_py": BuildPyWithSQL})
