"""The apply side: row changes in, a downstream MySQL-family database equal to the upstream
out. Spark-independent: Spark tasks call these functions (see ``docs/apply.md``).

- :mod:`~binrelay.apply.changes`: ``TableRef``, ``Change``, ``ABSENT`` (frozen, picklable);
- :mod:`~binrelay.apply.plan` (pure): ``plan_batch``, ``partition_of`` and the pieces;
- :mod:`~binrelay.apply.sql` (pure): quoting and the statements sent;
- :mod:`~binrelay.apply.checkpoint`: the checkpoint table and the batch protocol;
- :mod:`~binrelay.apply.downstream`: ``Downstream``, pooled connections, the error map;
- :mod:`~binrelay.apply.applier`: ``apply_plan_part``, ``apply_parts_with_checkpoint``,
  ``apply_transaction``, statements
  run within packet limits;
- :mod:`~binrelay.apply.ddl`: ``apply_ddl``;
- :mod:`~binrelay.apply.ddl_journal`: whether a DDL ran before a crash (journal + catalog).

May import: binlog, rows, errors, failpoints, position, sqlclient.
"""

from binrelay.apply.applier import apply_parts_with_checkpoint, apply_plan_part, apply_transaction
from binrelay.apply.changes import ABSENT, DELETE, INSERT, UPDATE, Change, TableRef
from binrelay.apply.checkpoint import (
    Checkpoint,
    CheckpointStore,
    CheckpointUpdate,
    TaskLedger,
    create_checkpoint_table,
    finish_batch,
    init_checkpoint,
    mark_in_flight,
    read_checkpoint,
)
from binrelay.apply.ddl import DdlResult, apply_ddl
from binrelay.apply.downstream import Downstream
from binrelay.apply.plan import BatchPlan, PlanPart, partition_of, plan_batch
from binrelay.apply.sql import REPLICA_SQL_MODE

__all__ = [
    "ABSENT",
    "DELETE",
    "INSERT",
    "REPLICA_SQL_MODE",
    "UPDATE",
    "BatchPlan",
    "Change",
    "Checkpoint",
    "CheckpointStore",
    "CheckpointUpdate",
    "DdlResult",
    "Downstream",
    "PlanPart",
    "TableRef",
    "TaskLedger",
    "apply_ddl",
    "apply_parts_with_checkpoint",
    "apply_plan_part",
    "apply_transaction",
    "create_checkpoint_table",
    "finish_batch",
    "init_checkpoint",
    "mark_in_flight",
    "partition_of",
    "plan_batch",
    "read_checkpoint",
]
