"""The source's rows: Spark's Kafka source schema, as DDL (what Spark asks the data source
for) and as Arrow (what every yielded batch must match exactly). Only pyarrow: the driver's
planning process imports it without the protocol codecs."""

from __future__ import annotations

from typing import Final

import pyarrow as pa

BASE_SCHEMA_DDL: Final = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL: Final = ", headers array<struct<key:string,value:binary>>"

HEADERS_TYPE: Final = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE: Final = pa.timestamp("us", tz="UTC")


def schema(with_headers: bool) -> pa.Schema:
    """The source's Arrow schema (what Spark checks every yielded batch against)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if with_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)
