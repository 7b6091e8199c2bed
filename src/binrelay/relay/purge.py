"""Purging relay files: what may go (pure planning) and removing it (crash-safe).

Never removed: the file the relay is writing (the last subdir's relay.meta file) and
anything after it, and the file holding the oldest registered consumer position and anything
after it.  Requests that would remove such a file are refused, naming who holds it.

Kinds of purge, as in TiDB DM (SPEC §1):

* manual, ``purge-relay --filename F [--sub-dir S]``: every file before F in S, and every
  subdir before S entirely (without ``--sub-dir``: the newest subdir);
* by age (``[purge] expires`` hours): files not modified for that long, oldest first,
  stopping at the first newer file;
* by space (``[purge] remain-space`` GB): when free space is below it, the oldest files that
  may go, until enough space is free;
* applied (``[purge] gc-applied``, Drainer's GC): every file that all registered consumers
  have finished with.

Order of removal, so that a crash at any point leaves a relay dir the relay and readers
accept: files oldest first; then, for subdirs emptied entirely, ``server-uuid.index`` is
rewritten without them and their directories (by then holding only relay.meta) are removed.
A crash between those steps leaves an unlisted subdir without relay files, which the relay
removes when it opens the relay dir.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from binrelay.errors import BinrelayError
from binrelay.position import Position, SubdirName, binlog_sort_key
from binrelay.relay.chain import check_relay_dir
from binrelay.relay.consumers import Consumer, list_consumers, oldest
from binrelay.relay.layout import (
    fsync_dir,
    index_lock,
    read_index,
    write_index,
)
from binrelay.relay.relaydir import RelayView

log = logging.getLogger(__name__)


class PurgeError(BinrelayError):
    """A purge request that cannot be carried out; nothing was deleted."""

    code = "BR3101"


class PurgeRefused(PurgeError):
    code = "BR3102"


@dataclass(frozen=True)
class RelayFile:
    subdir: SubdirName
    name: str
    size: int
    mtime: float

    @property
    def key(self) -> tuple[int, tuple[str, int]]:
        return self.subdir.seq, binlog_sort_key(self.name)


@dataclass(frozen=True)
class RelayState:
    """A snapshot of the relay dir: subdirs in order, their files, the active file."""

    subdirs: tuple[SubdirName, ...]
    files: tuple[RelayFile, ...]  # in relay order
    active: Position  # the last subdir's relay.meta

    @property
    def active_key(self) -> tuple[int, tuple[str, int]]:
        return self.active.file_key()


@dataclass(frozen=True)
class PurgePlan:
    files: tuple[RelayFile, ...] = ()
    subdirs: tuple[SubdirName, ...] = ()  # emptied entirely: leave the index
    note: str = ""

    @property
    def empty(self) -> bool:
        return not self.files and not self.subdirs

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


def read_state(relay_dir: Path) -> RelayState:
    view = RelayView(relay_dir)
    # What is safe to remove is judged by consumers' positions along the chain: a chain
    # with a gap cannot be judged.
    check_relay_dir(relay_dir)
    files = []
    for subdir in view.index:
        for name in view.files(subdir):
            try:
                st = os.stat(view.path(subdir, name))
            except FileNotFoundError:
                continue
            files.append(RelayFile(subdir, name, st.st_size, st.st_mtime))
    return RelayState(view.index, tuple(files), view.end)


# --- planning (pure) ------------------------------------------------------------------------


def _limit(state: RelayState, consumers: list[Consumer], *, force: bool
           ) -> tuple[tuple[int, tuple[str, int]], str]:
    """Files strictly before the returned key may go; the text says what holds the limit."""
    key, why = state.active_key, f"the relay is writing {state.active.binlog_name} in " \
                                 f"{state.active.subdir}"
    holder = None if force else oldest(consumers)
    if holder is not None and holder.position.file_key() < key:
        key, why = holder.position.file_key(), holder.describe()
    return key, why


def _emptied(state: RelayState, doomed: tuple[RelayFile, ...]) -> tuple[SubdirName, ...]:
    gone = {(f.subdir, f.name) for f in doomed}
    last = state.subdirs[-1]
    return tuple(s for s in state.subdirs if s != last and all(
        (f.subdir, f.name) in gone for f in state.files if f.subdir == s))


def plan_manual(state: RelayState, consumers: list[Consumer], *, filename: str,
                sub_dir: str | None = None, force: bool = False) -> PurgePlan:
    """DM's ``purge-relay --filename F [--sub-dir S]``."""
    if sub_dir is None:
        subdir = state.subdirs[-1]
    else:
        matches = [s for s in state.subdirs if str(s) == sub_dir]
        if not matches:
            listed = ", ".join(str(s) for s in state.subdirs)
            raise PurgeError(f"sub-dir {sub_dir} is not in server-uuid.index ({listed})",
                             hint="pick a subdir from server-uuid.index")
        subdir = matches[0]
    try:
        target = (subdir.seq, binlog_sort_key(filename))
    except BinrelayError as exc:
        raise PurgeError(f"--filename {filename!r} is not a binlog file name") from exc
    if target > state.active_key:
        raise PurgeError(
            f"{filename} in {subdir} comes after the file the relay is writing "
            f"({state.active.binlog_name} in {state.active.subdir})",
            hint="purge-relay removes the files before the one named; name an earlier file")
    in_subdir = [f.name for f in state.files if f.subdir == subdir]
    is_active_name = subdir == state.active.subdir and filename == state.active.binlog_name
    if filename not in in_subdir and not is_active_name:
        raise PurgeError(
            f"{filename} is not a relay file of {subdir} (it has "
            f"{', '.join(in_subdir) if in_subdir else 'no files'})",
            hint="pick a file listed in that subdir")
    doomed = tuple(f for f in state.files if f.key < target)
    if not force:
        holder = oldest(consumers)
        if holder is not None and doomed and holder.position.file_key() <= doomed[-1].key:
            raise PurgeRefused(
                f"refusing to purge up to {filename} in {subdir}: {holder.describe()} still "
                f"needs {holder.position.binlog_name} in {holder.position.subdir}",
                hint="purge an earlier file, let the consumer move on, unregister it "
                     "(binrelay consumers --unregister NAME) or use --force")
    return PurgePlan(doomed, _emptied(state, doomed))


def plan_expired(state: RelayState, consumers: list[Consumer], *, now: float,
                 expires_hours: int) -> PurgePlan:
    if expires_hours <= 0:
        return PurgePlan()
    limit, why = _limit(state, consumers, force=False)
    cutoff = now - expires_hours * 3600
    doomed = []
    for f in state.files:
        if f.key >= limit or f.mtime >= cutoff:
            break
        doomed.append(f)
    return PurgePlan(tuple(doomed), _emptied(state, tuple(doomed)), note=why)


def plan_space(state: RelayState, consumers: list[Consumer], *, free_bytes: int,
               remain_gb: int) -> PurgePlan:
    if remain_gb <= 0:
        return PurgePlan()
    want = remain_gb * 1024**3 - free_bytes
    if want <= 0:
        return PurgePlan()
    limit, why = _limit(state, consumers, force=False)
    doomed: list[RelayFile] = []
    for f in state.files:
        if f.key >= limit or want <= 0:
            break
        doomed.append(f)
        want -= f.size
    return PurgePlan(tuple(doomed), _emptied(state, tuple(doomed)), note=why)


def plan_applied(state: RelayState, consumers: list[Consumer]) -> PurgePlan:
    if not consumers:
        return PurgePlan(note="no consumer is registered")
    limit, why = _limit(state, consumers, force=False)
    doomed = tuple(f for f in state.files if f.key < limit)
    return PurgePlan(doomed, _emptied(state, doomed), note=why)


def combine(*plans: PurgePlan) -> PurgePlan:
    files = {(f.subdir, f.name): f for p in plans for f in p.files}
    ordered = tuple(sorted(files.values(), key=lambda f: f.key))
    subdirs = tuple(sorted({s for p in plans for s in p.subdirs}))
    return PurgePlan(ordered, subdirs)


# --- doing it --------------------------------------------------------------------------------


def execute(relay_dir: Path, plan: PurgePlan) -> int:
    """Remove what ``plan`` names, crash-safely; returns the bytes freed."""
    with index_lock(relay_dir):
        return _remove(relay_dir, plan)


def _remove(relay_dir: Path, plan: PurgePlan) -> int:
    """``execute`` with the index lock already held."""
    freed = 0
    touched: set[SubdirName] = set()
    for f in plan.files:
        path = relay_dir / str(f.subdir) / f.name
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        freed += f.size
        touched.add(f.subdir)
        log.info("purged %s (%d bytes)", path, f.size)
    for subdir in touched:
        fsync_dir(relay_dir / str(subdir))
    if plan.subdirs:
        index = read_index(relay_dir) or []
        keep = [s for s in index if s not in plan.subdirs]
        if not keep:
            raise PurgeError("refusing to remove every subdir from server-uuid.index")
        write_index(relay_dir, keep)
        for subdir in plan.subdirs:
            shutil.rmtree(relay_dir / str(subdir), ignore_errors=True)
            log.info("removed emptied subdir %s", subdir)
        fsync_dir(relay_dir)
    return freed


def purge_manual(relay_dir: Path, *, filename: str, sub_dir: str | None = None,
                 force: bool = False) -> tuple[PurgePlan, int, list[Consumer]]:
    """Plan and carry out a manual purge; returns the plan, bytes freed and the consumers
    that ``force`` overrode."""
    with index_lock(relay_dir):
        state = read_state(relay_dir)
        consumers = list_consumers(relay_dir)
        plan = plan_manual(state, consumers, filename=filename, sub_dir=sub_dir, force=force)
        freed = _remove(relay_dir, plan)
    overridden = [c for c in consumers if force and plan.files and
                  c.position.file_key() <= plan.files[-1].key]
    return plan, freed, overridden


def purge_auto(relay_dir: Path, *, now: float, expires_hours: int, remain_gb: int,
               gc_applied: bool) -> tuple[PurgePlan, int]:
    """One automatic purge check; returns what was removed and the bytes freed."""
    with index_lock(relay_dir):
        state = read_state(relay_dir)
        consumers = list_consumers(relay_dir)
        free = shutil.disk_usage(relay_dir).free
        plans = [plan_expired(state, consumers, now=now, expires_hours=expires_hours),
                 plan_space(state, consumers, free_bytes=free, remain_gb=remain_gb)]
        if gc_applied:
            plans.append(plan_applied(state, consumers))
        plan = combine(*plans)
        return plan, _remove(relay_dir, plan)
