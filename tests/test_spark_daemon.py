"""The workers' daemon (``binrelay.spark.daemon``) imports pyspark and py4j from their
installed packages when Spark's zips are the same versions, and keeps the zips otherwise."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pyspark

from binrelay.spark.daemon import _SAME_FILES, replaceable_zips


def _files(name: str, version: bytes) -> dict[str, bytes]:
    return {"__init__.py": b"", **{f: b"# " + f.encode() + b"\n" for f in _SAME_FILES[name]},
            "version.py": version}


def _package(root: Path, name: str, version: bytes,
             changed: dict[str, bytes] | None = None) -> None:
    (root / name).mkdir(parents=True)
    for file, text in {**_files(name, version), **(changed or {})}.items():
        (root / name / file).write_bytes(text)


def _zip(path: Path, name: str, version: bytes | None) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for file, text in _files(name, version or b"").items():
            if version is not None or file != "version.py":
                z.writestr(f"{name}/{file}", text)
    return str(path)


def test_only_zips_of_the_installed_versions_are_replaced(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _package(site, "pyspark", b'__version__ = "4.3.0"\n')
    _package(site, "py4j", b'__version__ = "0.10.9.9"\n')
    same = _zip(tmp_path / "pyspark.zip", "pyspark", b'__version__ = "4.3.0"\n')
    py4j = _zip(tmp_path / "py4j-0.10.9.9-src.zip", "py4j", b'__version__ = "0.10.9.9"\n')
    assert replaceable_zips([same, py4j, str(site)]) == [same, py4j]
    # Another version installed, none installed, a zip without its version file, a file
    # that is not a zip: Spark's zips stay.
    other = tmp_path / "other"
    _package(other, "pyspark", b'__version__ = "3.5.1"\n')
    assert replaceable_zips([same, str(other)]) == []
    # The same version, a worker patched: the zips stay.
    patched = tmp_path / "patched"
    _package(patched, "pyspark", b'__version__ = "4.3.0"\n', {"worker.py": b"# patched\n"})
    assert replaceable_zips([same, str(patched)]) == []
    # Two zips of one package, one of another version: neither goes (the other would then
    # be imported first, where Spark's daemon imports the first).
    (tmp_path / "old").mkdir()
    old = _zip(tmp_path / "old" / "pyspark.zip", "pyspark", b'__version__ = "4.2.0"\n')
    assert replaceable_zips([same, old, py4j, str(site)]) == [py4j]
    assert replaceable_zips([same, py4j, str(tmp_path / "empty")]) == []
    (tmp_path / "bare").mkdir()
    bare = _zip(tmp_path / "bare" / "pyspark.zip", "pyspark", None)
    assert replaceable_zips([bare, str(site)]) == []
    broken = tmp_path / "broken" / "pyspark.zip"
    broken.parent.mkdir()
    broken.write_bytes(b"not a zip")
    assert replaceable_zips([str(broken), str(site)]) == []


def test_workers_import_the_installed_pyspark(spark) -> None:
    # (A lambda: pickled by value, as the workers cannot import this module.)
    where_from = lambda _: (__import__("pyspark").__file__, __import__("sys").path)  # noqa: E731
    (where, path), = spark.sparkContext.parallelize([0], 1).map(where_from).collect()
    assert where == pyspark.__file__
    assert not [e for e in path if e.endswith(("pyspark.zip", "-src.zip"))], path
