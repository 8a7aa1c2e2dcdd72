"""The consume-transform-produce app of `test_exactly_once.py`, run as its own process.

    python eos_app.py BOOTSTRAP INPUT OUTPUT GROUP TXN_ID BATCH PAUSE_S

The standard librdkafka exactly-once loop (confluent-kafka's eos-transactions example): a
read_committed consumer of INPUT in group GROUP (no auto commit, static membership so a
restarted app takes its predecessor's place at once), a transactional producer with the fixed
TXN_ID (so a restarted app fences its predecessor). Each transaction: up to BATCH records
polled, their values written to OUTPUT as b"out-" + value and flushed, PAUSE_S asleep (inside
the transaction, so a kill most likely hits an open one with records in the log), the
consumer's positions sent with send_offsets_to_transaction, commit. An abortable error aborts
and rewinds the consumer to the group's committed offsets; a retriable one is retried. Each
commit prints one line `committed <transactions> <records>` (flushed), the test's progress
signal. A fatal error prints `fatal <error>` and exits with 3. EOS_APP_DEBUG in the
environment sets the producer's librdkafka `debug` contexts, EOS_APP_CONSUMER_DEBUG the
consumer's.
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer


def say(line: str) -> None:
    print(line, flush=True)


def rewind(consumer: Consumer) -> None:
    """Seek every assigned partition back to the group's committed offset."""
    assignment = consumer.assignment()
    if not assignment:
        return
    for tp in consumer.committed(assignment, timeout=30):
        if tp.offset < 0:
            tp.offset = -2  # OFFSET_BEGINNING: nothing committed yet
        consumer.seek(tp)


def main() -> int:
    bootstrap, input_topic, output_topic, group, txn_id, batch_s, pause_s = sys.argv[1:8]
    batch, pause = int(batch_s), float(pause_s)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": f"{txn_id}-member",
            # librdkafka resets its member id once no heartbeat succeeded for the session
            # timeout, and a static member that does is fenced: the session outlasts a
            # coordinator failover (ZooKeeper session + load); restarts replace the static
            # member at once anyway.
            "session.timeout.ms": 30000,
            "heartbeat.interval.ms": 1000,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
            "log_level": 7 if os.environ.get("EOS_APP_CONSUMER_DEBUG") else 3,
            **(
                {"debug": os.environ["EOS_APP_CONSUMER_DEBUG"]}
                if os.environ.get("EOS_APP_CONSUMER_DEBUG")
                else {}
            ),
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 20000,
            "reconnect.backoff.max.ms": 1000,
            "acks": "all",
            "linger.ms": 5,
            "request.timeout.ms": 5000,
            "topic.metadata.refresh.interval.ms": 1000,
            "log_level": 7 if os.environ.get("EOS_APP_DEBUG") else 3,
            **({"debug": os.environ["EOS_APP_DEBUG"]} if os.environ.get("EOS_APP_DEBUG") else {}),
        }
    )
    producer.init_transactions(60)
    say("initialized")
    consumer.subscribe([input_topic])
    txns = records = 0
    while True:
        msgs = consumer.consume(batch, timeout=0.5)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        try:
            producer.begin_transaction()
            for m in msgs:
                value = m.value()
                assert value is not None
                producer.produce(output_topic, b"out-" + value, key=m.key())
            producer.flush(30)  # the records are in the log, the transaction open
            if pause > 0:
                time.sleep(pause)
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            while True:
                try:
                    producer.commit_transaction(30)
                    break
                except KafkaException as e:
                    err = e.args[0]
                    if err.retriable() and not err.txn_requires_abort():
                        say(f"retry commit {err}")
                        continue
                    raise
        except KafkaException as e:
            err: KafkaError = e.args[0]
            if err.fatal():
                say(f"fatal {err}")
                return 3
            say(f"abort {err} (requires abort {err.txn_requires_abort()})")
            while True:
                try:
                    producer.abort_transaction(30)
                    break
                except KafkaException as e2:
                    err2: KafkaError = e2.args[0]
                    if err2.fatal():
                        say(f"fatal on abort {err2}")
                        return 3
                    say(f"abort failed {err2}, again")
            rewind(consumer)
            continue
        txns += 1
        records += len(msgs)
        say(f"committed {txns} {records}")


if __name__ == "__main__":
    sys.exit(main())
