"""Which slot, and so which bucket, a message is in: one hash of its flow id and sequence number, shared by the
capture tasks (which write a local run's observations grouped by slot, a row group each, listed in the file's
metadata under :data:`SLOT_METADATA`) and ``spark.messagerows`` (whose bucket tasks read their slots' row groups)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["SLOTS", "SLOT_METADATA", "NULL64", "bucket_of", "slots_of", "ints"]

#: a local run's messages are in this many slots (its buckets are sets of slots: at most this many buckets),
#: each a row group of every observations file (the capture tasks write them so; the file's metadata lists them)
SLOTS = 64
SLOT_METADATA = "testbed.message_slots"
NULL64 = np.iinfo(np.int64).min  # a null flow id or sequence number: a key value of its own


def ints(column, null: int) -> np.ndarray:
    """An integer Arrow column as numpy, a null as ``null`` (never through float64)."""
    return column.fill_null(null).to_numpy() if column.null_count else column.to_numpy()


def bucket_of(flow_id: np.ndarray, seq: np.ndarray, buckets: int) -> np.ndarray:
    """A message's bucket from its flow id and sequence number (``NULL64`` for a null): a multiplicative hash,
    so the buckets are even however the numbers run."""
    with np.errstate(over="ignore"):
        h = flow_id.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + seq.astype(np.uint64)
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return (h % np.uint64(buckets)).astype(np.int64)


def slots_of(observations: pa.Table) -> np.ndarray:
    """Each observation's slot (0 .. :data:`SLOTS` - 1): its message's, from flow id and sequence number. A
    local run's bucket is a set of slots (``spark.messagerows.local_bucket_task``)."""
    return bucket_of(ints(observations.column("flow_id"), NULL64), ints(observations.column("seq"), NULL64),
                     SLOTS)
