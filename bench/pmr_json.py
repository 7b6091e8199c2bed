"""python-mysql-replication as a user would dump row changes as JSON: one line per row.

    python -m bench.pmr_json --port PORT --file mysql-bin.000001 [--server-id 4243]

The anchor side of ``bench.dump_throughput``, in a module of its own so that its process
imports python-mysql-replication (PyPI ``mysql-replication``, the ``bench`` extra) and
nothing of binrelay.  It connects to the server on 127.0.0.1 as a replica (user root, no
password), non-blocking, from ``--file`` at position 4, asks for the rows events only and
prints ``json.dumps`` of ``{"schema", "table", "op", "before", "after"}`` for every row
(``default=str`` for the values JSON has no form for: datetimes, Decimals, bytes).
"""

from __future__ import annotations

import argparse
import json
import sys

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--file", required=True, help="the first binlog file")
    parser.add_argument("--server-id", type=int, default=4243)
    args = parser.parse_args(argv)
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": args.port, "user": "root",
                             "password": ""},
        server_id=args.server_id, blocking=False, resume_stream=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        log_file=args.file, log_pos=4)
    write = sys.stdout.write
    try:
        for ev in stream:
            if isinstance(ev, WriteRowsEvent):
                for row in ev.rows:
                    write(json.dumps({"schema": ev.schema, "table": ev.table, "op": "insert",
                                      "before": None, "after": row["values"]},
                                     default=str) + "\n")
            elif isinstance(ev, DeleteRowsEvent):
                for row in ev.rows:
                    write(json.dumps({"schema": ev.schema, "table": ev.table, "op": "delete",
                                      "before": row["values"], "after": None},
                                     default=str) + "\n")
            else:
                for row in ev.rows:
                    write(json.dumps({"schema": ev.schema, "table": ev.table, "op": "update",
                                      "before": row["before_values"],
                                      "after": row["after_values"]}, default=str) + "\n")
    finally:
        stream.close()
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
