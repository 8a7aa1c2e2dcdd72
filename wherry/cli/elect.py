"""`wherry elect`: a kafka-leader-election.sh look-alike (ElectLeaders through confluent-kafka).

`--election-type preferred|unclean` and exactly one of `--all-topic-partitions`,
`--path-to-json-file FILE` (`{"partitions":[{"topic":"t","partition":0}]}`) or
`--topic T --partition P`. Output is Kafka's: "Successfully completed leader election
(PREFERRED) for partitions t-0, t-1", "Valid replica already elected for partitions t-2" and, for
each failure, "Error completing leader election (PREFERRED) for partition: t-3: <exception>"; the
exit status is 1 when any partition failed.
"""

from __future__ import annotations

from pathlib import Path

import click
from confluent_kafka import KafkaError

from wherry.cli.common import CommandError, ErrorsReported, admin_options, exits_on_error
from wherry.cli.reassign_json import TP, parse_election_partitions, tp_str
from wherry.cli.reassign_service import ReassignService

_handle_errors = exits_on_error("Error: ")


def _selection(all_topic_partitions: bool, path_to_json_file: Path | None, topic: str | None,
               partition: int | None) -> list[TP] | None:
    """The partitions to elect (None: all), checked like Kafka's option validation."""
    given = sum((topic is not None, all_topic_partitions, path_to_json_file is not None))
    if given != 1:
        raise CommandError("One and only one of the following options is required: "
                           "topic, all-topic-partitions, path-to-json-file")
    if topic is not None and partition is None:
        raise CommandError("Missing required option(s): partition")
    if topic is None and partition is not None:
        raise CommandError("Option partition is only allowed if topic is used")
    if path_to_json_file is not None:
        try:
            text = path_to_json_file.read_text(encoding="utf-8")
        except OSError as e:
            raise CommandError(f"Cannot read {path_to_json_file}: {e.strerror or e}") from e
        return parse_election_partitions(text)
    if topic is not None and partition is not None:
        return [(topic, partition)]
    return None


@click.command()
@admin_options("Timeout of the election request, in ms.", "--timeout")
@click.option("--election-type", required=True,
              type=click.Choice(["preferred", "unclean"], case_sensitive=False),
              help="preferred: move leadership back to the preferred replica; unclean: elect "
                   "an out-of-sync replica where a partition has no leader.")
@click.option("--all-topic-partitions", is_flag=True,
              help="Elect on every partition of the cluster.")
@click.option("--path-to-json-file", type=click.Path(exists=True, dir_okay=False,
                                                     path_type=Path),
              help='The partitions: {"partitions":[{"topic":"foo","partition":1}]}')
@click.option("--topic", help="The topic of the one partition to elect on.")
@click.option("--partition", type=click.IntRange(min=0), help="With --topic: the partition.")
@_handle_errors
def elect(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
          election_type: str, all_topic_partitions: bool, path_to_json_file: Path | None,
          topic: str | None, partition: int | None) -> None:
    """Elect partition leaders (like kafka-leader-election)."""
    selection = _selection(all_topic_partitions, path_to_json_file, topic, partition)
    kind = election_type.upper()
    svc = ReassignService.open(bootstrap_server, command_config, timeout_ms)
    try:
        results = svc.elect_leaders(kind == "UNCLEAN", selection)
    finally:
        svc.close()
    succeeded = sorted(tp for tp, r in results.items() if r is None)
    noop = sorted(tp for tp, r in results.items()
                  if r is not None and r[0] == KafkaError.ELECTION_NOT_NEEDED)
    failed = {tp: r[1] for tp, r in results.items()
              if r is not None and r[0] != KafkaError.ELECTION_NOT_NEEDED}
    if succeeded:
        click.echo(f"Successfully completed leader election ({kind}) for partitions "
                   + ", ".join(map(tp_str, succeeded)))
    if noop:
        click.echo("Valid replica already elected for partitions " + ", ".join(map(tp_str, noop)))
    for tp in sorted(failed):
        click.echo(f"Error completing leader election ({kind}) for partition: "
                   f"{tp_str(tp)}: {failed[tp]}")
    if failed:
        click.echo(f"Error: {len(failed)} replica(s) could not be elected", err=True)
        raise ErrorsReported()
