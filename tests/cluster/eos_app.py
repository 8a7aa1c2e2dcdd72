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

librdkafka 2.16's send_offsets_to_transaction can block far past its timeout when the group
coordinator's broker died: the broker leaves the Metadata answers (as on Kafka), librdkafka
decommissions it but keeps it cached as the group coordinator and waits for it to come up,
never sending the TxnOffsetCommit nor checking the timeout (librdkafka issues #5511 and
#5456, open). A watchdog thread ends the app with exit 4 (`hung <call>`) when the call
overruns its own timeout by HANG_MARGIN_S; the test restarts it, as a supervisor would.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer


def say(line: str) -> None:
    print(line, flush=True)


SEND_OFFSETS_TIMEOUT_S = 10.0
HANG_MARGIN_S = 10.0


class Watchdog:
    """Exits the process (4) when an armed call has not returned by its deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: tuple[str, float] | None = None
        threading.Thread(target=self._watch, daemon=True).start()

    def arm(self, what: str, seconds: float) -> None:
        with self._lock:
            self._armed = (what, time.monotonic() + seconds)

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    def _watch(self) -> None:
        while True:
            time.sleep(0.2)
            with self._lock:
                armed = self._armed
            if armed is not None and time.monotonic() > armed[1]:
                say(f"hung {armed[0]} (librdkafka #5511/#5456: past its timeout)")
                os._exit(4)


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
    watchdog = Watchdog()
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
            watchdog.arm("send_offsets_to_transaction", SEND_OFFSETS_TIMEOUT_S + HANG_MARGIN_S)
            try:
                producer.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), SEND_OFFSETS_TIMEOUT_S
                )
            finally:
                watchdog.disarm()
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
