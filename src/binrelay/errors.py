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
