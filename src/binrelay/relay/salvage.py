"""``relay-log-recovery = true``: a damaged relay subdir mended by fetching again.

MySQL's ``relay_log_recovery`` trusts the applier's position and fetches everything after it
from the source again (SPEC.md §3).  Here the relay's readers are its registered consumers:
at start, the current subdir is read from the file holding the oldest consumer's position
(or from its first file when no consumer reads it), every event's checksum and every
hand-over between files checked.  At the first damage (bytes that fail their checksum, a
file cut short or missing, a ROTATE to a file that is not there) the damaged part is moved
aside (``<relay-dir>/damaged/<subdir>-<time>/``, never deleted): the damaged file is copied
there whole and cut back to its last intact transaction, later files are moved there;
relay.meta is set to that transaction end, and the relay fetches the rest from the
upstream as after any restart, byte for byte the upstream's.  Readers then continue
without a gap: what they read before the damage is kept as it was.

Nothing is changed when the upstream no longer has the file to fetch from: one line says
so.  Damage in earlier subdirs (another upstream's files) is not mended here.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from binrelay.errors import BinlogPurgedError, RelayDirError
from binrelay.position import SubdirName, binlog_sort_key
from binrelay.relay import consumers
from binrelay.relay.chain import check_handover
from binrelay.relay.layout import DIR_MODE, RelayMeta, fsync_dir, list_binlogs, write_meta
from binrelay.relay.scan import scan_file

log = logging.getLogger(__name__)

__all__ = ["Damage", "find_damage", "move_aside"]

ASIDE_DIRNAME = "damaged"


@dataclass(frozen=True, slots=True)
class Damage:
    """The first damage found, and where the intact relay ends before it."""

    #: What is wrong, for the log and the operator.
    what: str
    #: The relay resumes here: the file and offset of the last intact transaction end
    #: (offset 4: fetch the file whole), with the GTID set there.
    resume: RelayMeta


def first_needed_file(relay_dir: Path, subdir: SubdirName, files: list[str]) -> str | None:
    """The file of the current subdir from which some consumer still reads (the subdir's
    first file when none is registered in it, or one reads an earlier subdir)."""
    if not files:
        return None
    mine = [c.position for c in consumers.list_consumers(relay_dir)]
    if not mine or any(p.subdir.seq < subdir.seq for p in mine):
        return files[0]
    here = [p.binlog_name for p in mine if p.subdir.seq == subdir.seq]
    if not here:
        return None  # every consumer reads a later subdir: nothing here is needed
    oldest = min(here, key=binlog_sort_key)
    return next((f for f in files if binlog_sort_key(f) >= binlog_sort_key(oldest)), None)


def find_damage(subdir: Path, meta: RelayMeta | None, start: str | None, *,
                flavor: str | None) -> Damage | None:
    """The first damage in ``subdir`` from file ``start`` on, checking every event and
    every hand-over (a torn tail after relay.meta's position is not damage: the relay's
    ordinary recovery cuts it)."""
    files = list_binlogs(subdir)
    if start is None or start not in files:
        return None
    files = files[files.index(start):]
    gtids = ""
    for i, name in enumerate(files):
        path = subdir / name
        result = scan_file(path, flavor=flavor)
        last = i == len(files) - 1
        if result.fde is None:
            return Damage(f"relay file {path} has no readable binlog header",
                          RelayMeta(name, 4, gtids))
        gtids = result.safe_gtids
        if result.stop_reason:
            if last and (meta is None or (meta.binlog_name == name
                                          and result.stop_pos >= meta.binlog_pos)):
                return None  # torn after what relay.meta vouches for: ordinary recovery
            return Damage(f"relay file {path} is damaged at offset {result.stop_pos}"
                          f" ({result.stop_reason})", RelayMeta(name, result.safe_pos, gtids))
        if last:
            if meta is not None and binlog_sort_key(meta.binlog_name) > \
                    binlog_sort_key(name) and meta.binlog_pos > 4 and result.rotated_to:
                return Damage(f"relay file {subdir / result.rotated_to} is missing ({name}"
                              f" rotates to it; relay.meta is at {meta.binlog_name}:"
                              f"{meta.binlog_pos})",
                              RelayMeta(result.rotated_to, 4, gtids))
            return None
        try:
            check_handover(subdir, name, files[i + 1])
        except RelayDirError as exc:
            resume = (RelayMeta(result.rotated_to, 4, gtids) if result.rotated_to
                      else RelayMeta(name, result.safe_pos, gtids))
            return Damage(exc.message, resume)
    return None


def move_aside(relay_dir: Path, subdir: SubdirName, damage: Damage,
               upstream_files: dict[str, int]) -> Path | None:
    """Mend ``subdir`` as the module's docstring says; returns the directory the damaged
    part went to (None when only files were missing).  Refuses, changing nothing, when
    the upstream cannot give back what goes.
    """
    path = relay_dir / str(subdir)
    resume = damage.resume
    size = upstream_files.get(resume.binlog_name)
    if size is None or size < resume.binlog_pos:
        oldest = min(upstream_files, key=binlog_sort_key, default="(none)")
        raise BinlogPurgedError(
            f"relay-log-recovery: {damage.what}, and the upstream no longer has"
            f" {resume.binlog_name} to fetch it again from (its oldest binlog is {oldest});"
            " nothing was changed",
            hint="restore the relay files from a backup, or relay into a new relay dir and"
                 " resynchronise the downstream")
    files = list_binlogs(path)
    key = binlog_sort_key(resume.binlog_name)
    later = [f for f in files if binlog_sort_key(f) > key]
    cut = resume.binlog_name if resume.binlog_name in files else None
    if cut is None and not later:  # only files missing: nothing to keep
        write_meta(path, resume)
        log.warning("relay-log-recovery: %s; fetching again from %s:%d", damage.what,
                    resume.binlog_name, resume.binlog_pos)
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    aside = relay_dir / ASIDE_DIRNAME / f"{subdir}-{stamp}"
    aside.mkdir(mode=DIR_MODE, parents=True)
    os.chmod(aside.parent, DIR_MODE)
    if cut is not None:
        if resume.binlog_pos <= 4:
            os.replace(path / cut, aside / cut)
        else:
            shutil.copy2(path / cut, aside / cut)
            with open(path / cut, "r+b") as f:
                f.truncate(resume.binlog_pos)
                f.flush()
                os.fsync(f.fileno())
    for name in later:
        os.replace(path / name, aside / name)
    fsync_dir(aside)
    fsync_dir(path)
    write_meta(path, resume)
    log.warning("relay-log-recovery: %s; moved the damaged part to %s and fetching again from"
                " %s:%d", damage.what, aside, resume.binlog_name, resume.binlog_pos)
    return aside
