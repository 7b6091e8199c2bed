"""The Python workers' daemon (``spark.python.daemon.module``): PySpark's own
``pyspark.daemon``, imported from the installed packages rather than from Spark's zips.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on the workers'
``PYTHONPATH``.  Python keeps no bytecode for modules imported from a zip, so each daemon
compiled pyspark's modules again as it started (0.9 s of CPU for the imports, against
0.2 s from the installed package's bytecode, measured on this project's machine), and
each forked worker re-read both zips' directories when its first task's setup invalidated
the import caches.  Where the same pyspark and py4j are installed (pip installs pyspark's
zip and package from one wheel: their protocol modules are compared byte for byte), the
daemon drops the zips from its path before importing anything of theirs; where they differ
or are not installed (a Spark distribution's executors), it runs from the zips, as Spark's
own daemon would.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import zipfile
import zlib

#: Per package, the modules whose bytes must be the same in Spark's zip and installed: the
#: version, and what speaks Spark's protocol (the daemon, the worker and its helpers, the
#: serializers; py4j's gateway).
_SAME_FILES = {
    "pyspark": ("version.py", "daemon.py", "worker.py", "worker_util.py", "serializers.py"),
    "py4j": ("version.py", "java_gateway.py", "protocol.py"),
}


def _package_of(entry: str) -> str | None:
    name = os.path.basename(entry)
    if name == "pyspark.zip":
        return "pyspark"
    if name.startswith("py4j-") and name.endswith(".zip"):
        return "py4j"
    return None


def _installed_crcs(package: str, path: list[str]) -> list[int] | None:
    spec = importlib.machinery.PathFinder.find_spec(package, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = next(iter(spec.submodule_search_locations))
    try:
        crcs = []
        for name in _SAME_FILES[package]:
            with open(os.path.join(root, name), "rb") as f:
                crcs.append(zlib.crc32(f.read()))
    except OSError:
        return None
    return crcs


def _zip_crcs(entry: str, package: str) -> list[int] | None:
    try:
        with zipfile.ZipFile(entry) as z:
            return [z.getinfo(f"{package}/{name}").CRC for name in _SAME_FILES[package]]
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def replaceable_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that are Spark's zips of a package installed elsewhere on
    ``path`` with the same protocol modules: every zip of that package, or none when one
    of them differs (the first would otherwise leave a different one first)."""
    zips = [e for e in path if _package_of(e) is not None]
    rest = [e for e in path if e not in zips]
    out = []
    for package in _SAME_FILES:
        mine = [e for e in zips if _package_of(e) == package]
        if not mine:
            continue
        installed = _installed_crcs(package, rest)
        if installed is not None and all(_zip_crcs(e, package) == installed for e in mine):
            out += mine
    return out


def main() -> None:
    for entry in replaceable_zips(sys.path):
        sys.path.remove(entry)
        sys.path_importer_cache.pop(entry, None)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
