"""One error hierarchy for the whole project.

Every error an operator can meet carries a stable code, a one-line message saying what is
wrong, and a hint saying what to do.  The CLI prints ``str(err)`` (one line) and exits with
``err.exit_code``; nothing else about an error is needed to handle it.
"""

from __future__ import annotations


class BinrelayError(Exception):
    """Base class: ``code`` is stable (documented), ``hint`` tells the operator what to do."""

    code = "BR0000"
    hint = ""
    exit_code = 1
    #: "local" (our side: files, config) or "remote" (the upstream or downstream server).
    origin = "local"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint

    def __str__(self) -> str:
        text = f"[{self.code}] {self.message}"
        if self.hint:
            text += f"; {self.hint}"
        return text


class ConfigError(BinrelayError):
    """The configuration file is missing, malformed, or holds a bad key or value."""

    code = "BR1001"
    exit_code = 2


class BinlogFormatError(BinrelayError):
    """Bytes that are not a valid binlog event (truncated, corrupt, bad checksum)."""

    code = "BR2001"

    def __init__(
        self, message: str, *, path: str | None = None, offset: int | None = None,
        hint: str | None = None,
    ) -> None:
        where = ""
        if path is not None:
            where = f"{path}"
            if offset is not None:
                where += f" at offset {offset}"
            where += ": "
        elif offset is not None:
            where = f"at offset {offset}: "
        super().__init__(where + message, hint=hint)
        self.reason = message
        self.path = path
        self.offset = offset


class IncompleteEventError(BinlogFormatError):
    """The input ends inside an event: more bytes are needed (a torn tail)."""

    code = "BR2002"


class ChecksumMismatchError(BinlogFormatError):
    code = "BR2003"
    hint = "the relay file is corrupt; move it away and let the relay fetch it again"


class GtidError(BinrelayError):
    """A GTID or GTID set that cannot be parsed."""

    code = "BR2101"


class RelayDirError(BinrelayError):
    """The relay directory is unusable: unwritable, inconsistent index or meta, damaged files."""

    code = "BR3001"


class RelayConflictError(RelayDirError):
    """The upstream sent bytes that differ from bytes already relayed at the same position."""

    code = "BR3002"
    hint = ("the upstream binlog changed under the relay (RESET MASTER or a different server?); "
            "move the relay dir away or point relay-binlog-name/relay-binlog-gtid at a new start")


class UpstreamError(BinrelayError):
    """The upstream refused or broke the replication session."""

    code = "BR4001"
    origin = "remote"
    #: Worth reconnecting (network trouble, server restart) rather than giving up.
    retryable = False


class UpstreamTornBinlogError(UpstreamError):
    """The upstream's binlog ``file`` ends inside an event at ``pos`` (error 1236, "binlog
    truncated in the middle of event"): a server that crashed while writing it leaves its
    last event torn, and the transaction it belonged to was rolled back at its restart."""

    def __init__(self, message: str, *, file: str, pos: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.file = file
        self.pos = pos


class UpstreamConnectionError(UpstreamError):
    code = "BR4002"
    retryable = True


class UpstreamAuthError(UpstreamError):
    code = "BR4003"
    hint = ("check [from] user and password, and that the user has REPLICATION SLAVE and "
            "REPLICATION CLIENT")


class UpstreamConfigError(UpstreamError):
    """The upstream is reachable but not set up for relaying (binlog off, not ROW, ...)."""

    code = "BR4004"


class BinlogPurgedError(UpstreamError):
    """The upstream no longer has the binlog the relay needs."""

    code = "BR4005"


class UpstreamDivergedError(UpstreamError):
    """The upstream no longer holds what the relay holds: it lost its binlog tail (a crash
    with ``sync_binlog=0``, a restore) or is a failover target behind the relay."""

    code = "BR4006"
    hint = ("the relay holds transactions this upstream does not: make the upstream whole "
            "again (or point [from] at a server that has them); to follow this history "
            "instead, start a new relay dir and resynchronise the downstream")


class ApplyError(BinrelayError):
    """The apply side (planning changes, writing them downstream) cannot go on.

    ``table`` (``schema.table`` text) and ``position`` (the relay position of the change, in
    the caller's sortable form) say where, when known; both are in the one-line message too.
    """

    code = "BR5001"

    def __init__(
        self, message: str, *, table: str | None = None,
        position: tuple[int, ...] | None = None, hint: str | None = None,
    ) -> None:
        where = []
        if table is not None:
            where.append(f"table {table}")
        if position is not None:
            where.append(f"position {'.'.join(map(str, position))}")
        super().__init__(message + (f" ({', '.join(where)})" if where else ""), hint=hint)
        self.reason = message
        self.table = table
        self.position = position


class ChangeError(ApplyError):
    """A change handed to the planner is malformed (bad op, image shape, key, position)."""

    code = "BR5002"
    hint = "this is a bug in whatever built the change; report it with the relay position"


class CheckpointError(ApplyError):
    """The checkpoint row is missing, belongs to another batch, or does not match a request."""

    code = "BR5003"
    hint = "run `binrelay recover` to finish the batch in flight before starting a new one"


class UnfaithfulApplyError(ApplyError):
    """Applying would not give what a replica gets (a downstream trigger would fire again,
    a statement would miss the upstream's triggers...): binrelay stops instead."""

    code = "BR5004"


class NamelessRowsError(UnfaithfulApplyError):
    """Rows logged without column names (``binlog_row_metadata`` NO_LOG or MINIMAL) met by
    a sync whose catalog rules hold no tables' columns: the sync reads them and applies the
    batch again, by position (``binrelay.apply.positional``).  Seen by an operator only
    where that cannot happen."""


class DdlOutcomeUnknownError(ApplyError):
    """A DDL of a batch in flight may or may not have run before a crash, and the
    downstream's catalog cannot tell (its effect is on accounts, plugins, servers...).
    binrelay neither runs it a second time nor skips it on a guess."""

    code = "BR5005"


class DownstreamError(ApplyError):
    """The downstream server refused or broke an apply session."""

    code = "BR5101"
    origin = "remote"
    #: Worth reconnecting and running the same task again (it is idempotent).
    retryable = False

    def __init__(
        self, message: str, *, table: str | None = None,
        position: tuple[int, ...] | None = None, hint: str | None = None,
        errno: int | None = None,
    ) -> None:
        super().__init__(message, table=table, position=position, hint=hint)
        #: The server's (or the client library's) error number, when there is one.
        self.errno = errno


class DownstreamConnectionError(DownstreamError):
    code = "BR5102"
    retryable = True
    hint = "check that the downstream in [to] is up and reachable; the batch is replayed on retry"


class DownstreamAuthError(DownstreamError):
    code = "BR5103"
    hint = ("check [to] user and password, and that the user may write every replicated "
            "schema and the checkpoint schema")


class DownstreamRowError(DownstreamError):
    """The downstream rejected a row the upstream accepted (constraint, type, missing row)."""

    code = "BR5104"
    hint = ("the downstream table differs from the upstream's (a key, NOT NULL, type, "
            "partitioning or row the upstream does not have); fix it downstream and run "
            "again: nothing of the failed task was kept and the checkpoint did not move")


class DownstreamSchemaError(DownstreamError):
    """A table or column the change needs does not exist downstream."""

    code = "BR5105"
    hint = ("create the table downstream as the upstream has it (or replay the DDL) and run "
            "again; the checkpoint did not move")


class DownstreamDdlError(DownstreamError):
    """A DDL statement failed downstream for a reason other than having run before."""

    code = "BR5106"
    hint = "apply the DDL by hand (or fix what blocks it) and run again"


class SparkError(BinrelayError):
    """Spark itself failed: its driver JVM did not start, or a job failed for a reason that is
    not one of ours (an executor or Python worker lost, out of memory)."""

    code = "BR5201"
    hint = ('Spark\'s own messages are in the log (log-level = "debug"); run again: the batch '
            "in flight is replayed")


class InternalError(BinrelayError):
    """An exception binrelay did not expect, on the driver or in a Spark task: a bug."""

    code = "BR0001"
    hint = ('this is a bug: the traceback is in the log (log-level = "debug"); report it with '
            "that traceback")
