"""The Python workers' daemon (``spark.python.daemon.module``): PySpark's own
``pyspark.daemon``, imported from the installed packages rather than from Spark's zips.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on the workers'
``PYTHONPATH``.  Python keeps no bytecode for modules imported from a zip, so each daemon
compiled pyspark's modules again as it started (0.9 s of CPU for the imports, against
0.2 s from the installed package's bytecode, measured on this project's machine), and
each forked worker re-read both zips' directories when its first task's setup invalidated
the import caches.  Where the same pyspark and py4j are installed (pip installs pyspark's
zip and package from one wheel), the daemon drops the zips from its path before importing
anything of theirs; where they differ or are not installed (a Spark distribution's
executors), it runs from the zips, as Spark's own daemon would.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import zipfile

#: The module whose text tells a zip's version from an installed one's, per package.
_VERSION_FILES = {"pyspark": "pyspark/version.py", "py4j": "py4j/version.py"}


def _package_of(entry: str) -> str | None:
    name = os.path.basename(entry)
    if name == "pyspark.zip":
        return "pyspark"
    if name.startswith("py4j-") and name.endswith(".zip"):
        return "py4j"
    return None


def _installed_text(package: str, path: list[str]) -> bytes | None:
    spec = importlib.machinery.PathFinder.find_spec(package, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    version = os.path.join(next(iter(spec.submodule_search_locations)),
                           os.path.basename(_VERSION_FILES[package]))
    try:
        with open(version, "rb") as f:
            return f.read()
    except OSError:
        return None


def _zip_text(entry: str, package: str) -> bytes | None:
    try:
        with zipfile.ZipFile(entry) as z:
            return z.read(_VERSION_FILES[package])
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def replaceable_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that are Spark's zip of a package also installed, in the
    same version, elsewhere on ``path``."""
    zips = [e for e in path if _package_of(e) is not None]
    rest = [e for e in path if e not in zips]
    out = []
    for entry in zips:
        package = _package_of(entry)
        assert package is not None
        text = _zip_text(entry, package)
        if text is not None and text == _installed_text(package, rest):
            out.append(entry)
    return out


def main() -> None:
    for entry in replaceable_zips(sys.path):
        sys.path.remove(entry)
        sys.path_importer_cache.pop(entry, None)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
