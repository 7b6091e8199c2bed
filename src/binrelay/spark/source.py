"""The ``relaylog`` Spark data source: batch and streaming reads of a relay dir.

    spark.read.format("relaylog").option("relay_dir", "/data/relay").load()
    spark.readStream.format("relaylog").option("relay_dir", "/data/relay").load()

Options (strings, as Spark passes them):

- ``relay_dir`` (required): the relay directory; on a cluster, a path every executor reads.
- ``startingOffset``: ``earliest`` (default), ``latest``, or a JSON offset
  ``{"subdir": ..., "file": ..., "pos": ...}`` at a transaction end.
- ``endingOffset`` (batch only): ``latest`` (default: the durable end) or a JSON offset.
- ``maxBytesPerTrigger`` / ``maxTransactionsPerTrigger`` (streaming): admission control; one
  transaction always fits.
- ``ddlBarrier`` (default ``true``): a micro-batch never mixes DDL with other changes.
- ``partitionBytes`` (default 16 MiB): target size of one partition.
- ``consumerName``: register the query as a relay consumer, so purge keeps what it still
  needs; its safe position moves to each committed batch's end.

Rows follow :mod:`binrelay.spark.changes`.  Partitions are transaction-aligned byte ranges
of one relay file; ``read`` opens the file itself, so it runs on any executor and re-reads a
range identically after a failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from binrelay.errors import ConfigError
from binrelay.position import DICT_EXAMPLE, Position
from binrelay.relay import consumers
from binrelay.relay.relaydir import RelayView, durable_end, earliest
from binrelay.spark.changes import SCHEMA_DDL
from binrelay.spark.planning import Segment, advance, plan_partitions

try:  # Spark 4.2+: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older Spark
    ReadLimit = ReadAllAvailable = ReadMaxBytes = ReadMaxRows = None  # type: ignore[misc]
    SupportsTriggerAvailableNow = object  # type: ignore[misc,assignment]


class RelayPartition(InputPartition):
    def __init__(self, relay_dir: str, segment: Segment) -> None:
        super().__init__(segment)
        self.relay_dir = relay_dir
        self.segment = segment


class Options:
    """The source's options, checked once on the driver; picklable."""

    def __init__(self, raw: dict[str, str]) -> None:
        opts = {k.lower(): v for k, v in raw.items()}
        if not opts.get("relay_dir"):
            raise ConfigError("relaylog source: option relay_dir is required",
                              hint='.option("relay_dir", "/path/to/relay-dir")')
        self.relay_dir = str(Path(opts["relay_dir"]).expanduser().resolve())
        self.starting = opts.get("startingoffset", "earliest")
        self.ending = opts.get("endingoffset", "latest")
        self.max_bytes = _int(opts, "maxbytespertrigger")
        self.max_transactions = _int(opts, "maxtransactionspertrigger")
        self.partition_bytes = _int(opts, "partitionbytes") or 16 << 20
        self.ddl_barrier = opts.get("ddlbarrier", "true").lower() != "false"
        self.consumer = opts.get("consumername") or None
        if self.consumer:
            consumers.check_name(self.consumer)

    @property
    def path(self) -> Path:
        return Path(self.relay_dir)

    def position(self, text: str) -> Position:
        if text == "earliest":
            return earliest(self.path)
        if text == "latest":
            return durable_end(self.path)
        try:
            return Position.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"relaylog source: bad offset {text!r}",
                              hint=f"use earliest, latest or {DICT_EXAMPLE}") from exc


def _int(opts: dict[str, str], key: str) -> int | None:
    value = opts.get(key)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError as exc:
        raise ConfigError(f"relaylog source: option {key} must be an integer, got {value!r}"
                          ) from exc
    if number <= 0:
        raise ConfigError(f"relaylog source: option {key} must be positive, got {number}")
    return number


class RelayLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "relaylog"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return RelayBatchReader(Options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return RelayStreamReader(Options(self.options))


def read_segment(relay_dir: str, segment: Segment) -> Iterator[Any]:
    """Decode one partition into Arrow record batches (runs on an executor)."""
    from binrelay.spark.decode import decode_segment

    yield from decode_segment(Path(relay_dir), segment)


class RelayBatchReader(DataSourceReader):
    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        o = self.options
        start, end = o.position(o.starting), o.position(o.ending)
        return [RelayPartition(o.relay_dir, seg)
                for seg in plan_partitions(o.path, start, end, target_bytes=o.partition_bytes)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RelayPartition)
        yield from read_segment(partition.relay_dir, partition.segment)


class RelayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options) -> None:
        self.options = options
        self._target: Position | None = None  # Trigger.AvailableNow's end

    def initialOffset(self) -> dict[str, Any]:
        start = self.options.position(self.options.starting)
        self._register(start)
        return start.to_dict()

    def getDefaultReadLimit(self) -> Any:
        o = self.options
        if ReadMaxBytes is not None and o.max_bytes:
            return ReadMaxBytes(o.max_bytes)
        if ReadMaxRows is not None and o.max_transactions:
            return ReadMaxRows(o.max_transactions)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = durable_end(self.options.path)

    def latestOffset(self, start: dict[str, Any] | None = None,
                     limit: Any = None) -> dict[str, Any]:
        o = self.options
        begin = Position.from_dict(start) if start else o.position(o.starting)
        view = RelayView(o.path)
        end = self._target or view.end
        if end.sort_key <= begin.sort_key:
            return begin.to_dict()
        max_bytes = max_txns = None
        if ReadMaxBytes is not None and isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        elif ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_txns = limit.max_rows
        elif limit is None:
            max_bytes, max_txns = o.max_bytes, o.max_transactions
        return advance(view, begin, end, max_bytes=max_bytes, max_transactions=max_txns,
                       ddl_barrier=o.ddl_barrier).to_dict()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if start == end:
            return []
        o = self.options
        return [RelayPartition(o.relay_dir, seg) for seg in plan_partitions(
            o.path, Position.from_dict(start), Position.from_dict(end),
            target_bytes=o.partition_bytes)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RelayPartition)
        yield from read_segment(partition.relay_dir, partition.segment)

    def commit(self, end: dict[str, Any]) -> None:
        self._register(Position.from_dict(end))

    def _register(self, position: Position) -> None:
        if self.options.consumer:
            consumers.register(self.options.path, self.options.consumer, position)
