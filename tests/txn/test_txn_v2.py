"""Transactions v2 (KIP-890) in the coordinator's state machine, on in-memory storage: the
epoch bumped at every commit and abort (markers carry it), EndTxn's answer and its retries,
zombies fenced, the next producer id when the epoch is exhausted, fences bumping once, the
flexible TransactionLogValue with its tagged fields, and a v1 client unchanged."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from tests.txn.test_txn_coordinator import T0, T1, Harness
from wherry.protocol.records import build_batch
from wherry.txn.coordinator import EndResult
from wherry.txn.metadata import MAX_EPOCH, TxnState
from wherry.txn.records import TransactionLogValue, decode_value, encode_value

E = ErrorCode
S = TxnState
V2 = 2


def add2(h: Harness, pid: int, epoch: int, *tps: object) -> ErrorCode:
    """A partition leader adding a v2 client's partitions (AddPartitionsToTxn v5)."""
    out: list[ErrorCode] = []
    h.coord.add_partitions("tx", pid, epoch, tps or (T0,), h.now, out.append, V2)  # type: ignore[arg-type]
    return out[0]


def end2(h: Harness, pid: int, epoch: int, commit: bool, *, claim: int | None = None) -> EndResult:
    """EndTxn v5; `claim` is the producer id the broker claims when the coordinator asks."""
    out: list[EndResult] = []
    new_pid = claim if h.coord.needs_producer_id_for_end("tx", V2) else None
    h.coord.end_transaction_result(
        "tx", pid, epoch, commit, h.now, out.append, transaction_version=V2, new_producer_id=new_pid
    )
    return out[0]


def last_value(h: Harness) -> TransactionLogValue:
    _, value = h.storage.log[0][-1]
    assert value is not None
    return decode_value(value)


def test_commit_and_abort_bump_the_epoch_and_the_markers_carry_it() -> None:
    h = Harness(transaction_version=2)
    assert h.init() == (E.none, 100, 0)
    assert add2(h, 100, 0, T0, T1) == E.none
    assert h.txn().client_transaction_version == V2
    assert end2(h, 100, 0, True) == (E.none, 100, 1)
    prepared = last_value(h)
    assert (prepared.state_id, prepared.producer_epoch) == (S.PREPARE_COMMIT.id, 1)
    assert prepared.client_transaction_version == V2
    [pending] = h.markers.sent
    assert (pending.producer_id, pending.producer_epoch, pending.commit) == (100, 1, True)
    h.finish_markers()
    assert (h.txn().state, h.txn().producer_epoch) == (S.COMPLETE_COMMIT, 1)
    # The next transaction goes on at epoch 1; its abort bumps to 2.
    assert add2(h, 100, 1, T1) == E.none
    assert end2(h, 100, 1, False) == (E.none, 100, 2)
    [pending] = h.markers.sent
    assert (pending.producer_epoch, pending.commit, pending.partitions) == (2, False, {T1})
    h.finish_markers()
    assert (h.txn().state, h.txn().producer_epoch) == (S.COMPLETE_ABORT, 2)


def test_retries_and_zombies_after_an_end() -> None:
    h = Harness()
    h.init()
    add2(h, 100, 0)
    assert end2(h, 100, 0, True) == (E.none, 100, 1)
    # Markers in flight (Complete* pending): a retry, or the other end, waits.
    assert end2(h, 100, 0, True)[0] == E.concurrent_transactions
    assert end2(h, 100, 0, False)[0] == E.concurrent_transactions
    assert add2(h, 100, 0) == E.producer_fenced  # the old epoch's produce: a zombie
    h.finish_markers()
    assert end2(h, 100, 0, True) == (E.none, 100, 1)  # a retry gets the same answer
    assert end2(h, 100, 0, False)[0] == E.invalid_txn_state
    # The new epoch without a transaction, or an epoch nobody was given: fenced.
    assert end2(h, 100, 1, True)[0] == E.producer_fenced
    assert end2(h, 100, 5, True)[0] == E.producer_fenced
    assert end2(h, 999, 1, True)[0] == E.invalid_producer_id_mapping
    assert h.coord.verify_partitions("tx", 100, 0, [T0]) == E.producer_fenced


def test_exhausted_epoch_moves_to_a_new_producer_id() -> None:
    h = Harness(transaction_version=2)
    h.init()
    h.txn().producer_epoch = MAX_EPOCH - 1  # the last epoch a client may hold
    assert add2(h, 100, MAX_EPOCH - 1) == E.none
    assert h.coord.needs_producer_id_for_end("tx", V2)
    assert not h.coord.needs_producer_id_for_end("tx", 0)
    assert end2(h, 100, MAX_EPOCH - 1, True, claim=None)[0] == E.concurrent_transactions
    assert end2(h, 100, MAX_EPOCH - 1, True, claim=200) == (E.none, 200, 0)
    assert last_value(h).next_producer_id == 200
    [pending] = h.markers.sent  # the markers close the old id's transaction at its last epoch
    assert (pending.producer_id, pending.producer_epoch) == (100, MAX_EPOCH)
    h.finish_markers()
    t = h.txn()
    assert (t.producer_id, t.producer_epoch, t.last_producer_id) == (200, 0, 100)
    assert t.next_producer_id == -1
    done = last_value(h)
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id) == (200, 0, 100)
    # A retry with the old id and epoch is recognised and answered the new ones.
    assert end2(h, 100, MAX_EPOCH - 1, True) == (E.none, 200, 0)
    assert add2(h, 200, 0) == E.none


def test_v1_client_keeps_its_epoch() -> None:
    h = Harness(transaction_version=2)
    h.init()
    assert h.add(100, 0, T0) == E.none
    assert h.txn().client_transaction_version == 0
    assert h.end(100, 0, True) == E.none
    [pending] = h.markers.sent
    assert pending.producer_epoch == 0
    h.finish_markers()
    assert (h.txn().producer_epoch, h.txn().state) == (0, S.COMPLETE_COMMIT)
    assert h.add(100, 0, T1) == E.none  # the same epoch goes on


def test_fence_bumps_once_with_transactions_v2() -> None:
    for level in (0, 2):
        h = Harness(transaction_version=level)
        h.init()
        add2(h, 100, 0)
        # A new producer of the id: the ongoing transaction is aborted with epoch 1.
        assert h.init()[0] == E.concurrent_transactions
        [pending] = h.markers.sent
        assert (pending.producer_epoch, pending.commit) == (1, False), level
        h.finish_markers()
        assert h.txn().state is S.COMPLETE_ABORT
        assert h.init() == (E.none, 100, 2)
        assert add2(h, 100, 1) == E.producer_fenced  # the fenced producer


def test_v1_transaction_fenced_as_v1_on_a_v2_cluster() -> None:
    h = Harness(transaction_version=2)
    h.init()
    assert h.add(100, 0, T0) == E.none
    h.now += 60_001  # past its timeout: the coordinator aborts it with a fence
    h.coord.abort_timed_out_transactions(h.now)
    [pending] = h.markers.sent
    assert (pending.producer_epoch, pending.commit) == (1, False)
    h.finish_markers()
    assert h.txn().client_transaction_version == 0
    assert h.end(100, 0, True) == E.producer_fenced  # as before transactions v2
    assert h.end(100, 0, False) == E.producer_fenced


def test_failed_fence_write_does_not_leak_an_epoch() -> None:
    h = Harness(transaction_version=2)
    h.init()
    add2(h, 100, 0)
    h.storage.fail = E.not_enough_replicas
    assert h.init()[0] == E.coordinator_not_available
    assert h.txn().producer_epoch == 0 and h.txn().pending_state is None
    h.storage.fail = None
    assert h.init()[0] == E.concurrent_transactions
    [pending] = h.markers.sent
    assert pending.producer_epoch == 1


def test_a_new_coordinator_loads_the_v2_fields() -> None:
    h = Harness(transaction_version=2)
    h.init()
    h.txn().producer_epoch = MAX_EPOCH - 1
    add2(h, 100, MAX_EPOCH - 1)
    end2(h, 100, MAX_EPOCH - 1, True, claim=300)
    batch = build_batch(list(h.storage.log[0]))
    other = Harness(transaction_version=2)
    other.coord.unload_partition(0)
    other.coord.begin_loading(0, 9)
    assert other.coord.load_partition(0, [batch], now_ms=other.now, epoch=9)
    t = other.txn()
    assert (t.state, t.client_transaction_version, t.next_producer_id) == (
        S.PREPARE_COMMIT, V2, 300
    )
    [pending] = other.markers.sent
    assert (pending.producer_id, pending.producer_epoch) == (100, MAX_EPOCH)
    other.finish_markers()
    assert (other.txn().producer_id, other.txn().producer_epoch) == (300, 0)


def test_value_v1_tagged_fields() -> None:
    base = TransactionLogValue(7, 3, 60_000, S.ONGOING.id, frozenset({T0}), 10, 5)
    plain = encode_value(base, 1)
    assert decode_value(plain) == base
    tagged = TransactionLogValue(7, 3, 60_000, S.ONGOING.id, frozenset({T0}), 10, 5, 6, 8, 2)
    data = encode_value(tagged, 1)
    assert decode_value(data) == tagged
    # Three tags: 0 and 1 of 8 bytes, 2 of 2 bytes, each with a tag and a size byte.
    assert len(data) == len(plain) + 2 * (2 + 8) + (2 + 2)
    # v0 has no room for them: a v0 reader's view.
    assert decode_value(encode_value(tagged, 0)) == base
    # A coordinator of a cluster at transaction.version 0 writes v0, from 1 on v1.
    for level, version in ((0, 0), (1, 1), (2, 1)):
        h = Harness(transaction_version=level)
        h.init()
        _, value = h.storage.log[0][-1]
        assert value is not None and int.from_bytes(value[:2], "big") == version


def test_transaction_version_config() -> None:
    from wherry.server.config import BrokerConfig, BrokerConfigError
    from wherry.server.transactions import txn_coordinator_config

    assert BrokerConfig.from_props({}).transaction_version == 2
    cfg = BrokerConfig.from_props({"transaction.version": "0",
                                   "transaction.partition.verification.enable": "false"})
    assert cfg.transaction_version == 0 and not cfg.transaction_partition_verification_enable
    assert txn_coordinator_config(cfg).transaction_version == 0
    with pytest.raises(BrokerConfigError, match=r"transaction\.version: Value must be between"):
        BrokerConfig.from_props({"transaction.version": "3"})


def test_verification_guards_and_produce_errors() -> None:
    from wherry.coordinator.txn_verification import VerificationGuards, produce_error

    guards = VerificationGuards()
    first = guards.begin(T0, 7)
    assert guards.holds(T0, 7, first)
    guards.marker_written(T0, 7)  # a marker of that producer there: the check is void
    assert not guards.holds(T0, 7, first)
    again = guards.begin(T0, 7)
    other = guards.begin(T1, 7)
    guards.marker_written(T0, 8)  # another producer's marker changes nothing
    assert guards.holds(T0, 7, again) and guards.holds(T1, 7, other)
    guards.end(T0, 7, first)  # an old check ending leaves the newer one
    assert guards.holds(T0, 7, again)
    guards.end(T0, 7, again)
    assert not guards.holds(T0, 7, again)
    # Retriable refusals reach a producer as NOT_ENOUGH_REPLICAS (it retries), others as such.
    for retriable in (E.concurrent_transactions, E.coordinator_not_available, E.not_coordinator,
                      E.coordinator_load_in_progress, E.network_exception):
        assert produce_error(retriable) == E.not_enough_replicas
    for final in (E.invalid_producer_epoch, E.invalid_txn_state, E.transaction_abortable):
        assert produce_error(final) == final
