"""`wherry delete-records`: a kafka-delete-records.sh look-alike.

`--offset-json-file` names, per partition, the offset below which records are deleted
(`{"version":1,"partitions":[{"topic":"t","partition":0,"offset":5}]}`; -1: the high
watermark, every record). DeleteRecords goes through confluent-kafka's AdminClient; the output
is Kafka's: "Executing records delete operation", "Records delete operation completed:", then
one line per partition, `partition: t-0<TAB>low_watermark: 5` or `partition: t-0<TAB>error:
<Kafka's exception>`, sorted. A partition that fails makes the exit status 1.
"""

from __future__ import annotations

from pathlib import Path

import click
from confluent_kafka import KafkaException, TopicPartition

from wherry.cli.common import (
    AdminService,
    CommandError,
    ErrorsReported,
    admin_options,
    exits_on_error,
)
from wherry.cli.kafka_errors import kafka_exception_text
from wherry.cli.reassign_json import TP, parse_offsets_to_delete, tp_str

_handle_errors = exits_on_error("Error: ")


class DeleteRecordsService(AdminService):
    CLIENT_ID = "wherry-delete-records"

    def delete(self, offsets: dict[TP, int]) -> dict[TP, int | KafkaException]:
        """Each partition's new log start offset (low watermark), or its failure."""
        futs = self.admin.delete_records(
            [TopicPartition(t, p, off) for (t, p), off in offsets.items()],
            request_timeout=self.timeout_s, operation_timeout=self.timeout_s * 0.8)
        out: dict[TP, int | KafkaException] = {}
        for tp, fut in futs.items():
            key = (str(tp.topic), int(tp.partition))
            try:
                out[key] = int(self._wait(fut, "deleteRecords").low_watermark)
            except KafkaException as e:
                out[key] = e
        return out


@click.command("delete-records")
@admin_options("Timeout of each request to the cluster, in ms (wherry extra).")
@click.option("--offset-json-file", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help='Per partition, the offset to delete the records below: {"partitions": '
                   '[{"topic": "foo", "partition": 1, "offset": 1}], "version": 1} (-1: all).')
@_handle_errors
def delete_records(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
                   offset_json_file: Path) -> None:
    """Delete the records of partitions below given offsets (like kafka-delete-records.sh)."""
    try:
        text = offset_json_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CommandError(f"Cannot read {offset_json_file}: {e}") from e
    offsets = parse_offsets_to_delete(text)
    svc = DeleteRecordsService.connect(bootstrap_server, command_config, timeout_ms)
    click.echo("Executing records delete operation")
    results = svc.delete(offsets) if offsets else {}
    click.echo("Records delete operation completed:")
    failed = False
    for tp, result in sorted(results.items()):
        if isinstance(result, KafkaException):
            failed = True
            click.echo(f"partition: {tp_str(tp)}\terror: {kafka_exception_text(result)}")
        else:
            click.echo(f"partition: {tp_str(tp)}\tlow_watermark: {result}")
    if failed:
        raise ErrorsReported
