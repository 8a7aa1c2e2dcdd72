"""A follower told of a leader whose endpoint it does not know yet starts fetching from it once
the metadata names one.

The case: the only replica in a partition's ISR goes down; a controller tells the other
replicas that it still leads (no one else may), at its leader epoch, while no broker knows
where it is; it comes back at that same leader epoch, and a LeaderAndIsr at that epoch is
ignored as not newer. The followers must still start fetching once an UpdateMetadata (or a
LeaderAndIsr's live leaders) names the leader's endpoint, else the partition stays with an ISR
of one for good (and a topic with min.insync.replicas 2 refuses every acks=all write).

Sent over the wire to a `wherry server` of its own, as a controller would; the "leader" is a
listening socket of this test, which sees the follower's fetcher connect.
"""

from __future__ import annotations

import socket

from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess, wait_until
from tests.server.test_controller_requests_wire import (
    epochs,
    lai,
    lai_codes,
    new_topic,
    self_endpoint,
    send,
)
from wherry.protocol.interbroker import (
    BrokerEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)

LEADER = 7  # a broker id the cluster has never seen


def test_a_follower_fetches_once_its_leaders_endpoint_is_known(
    fresh_broker: BrokerProcess,
) -> None:
    b = fresh_broker.start()
    bs = b.bootstrap
    ce, be = epochs(b)
    t, tid, e0 = new_topic(bs, b"one")
    new_ce, e1 = ce + 1, e0 + 1
    with socket.create_server(("127.0.0.1", 0)) as leader:
        leader.settimeout(10)
        # This broker follows broker 7 at a newer leader epoch; nobody knows where 7 is.
        resp = send(bs, lai(new_ce, be, t, tid, leader=LEADER, leader_epoch=e1,
                            replicas=(LEADER, 0), b=b))
        assert lai_codes(resp) == (ErrorCode.none, [ErrorCode.none])
        # (the line is read from the broker's output by a thread of the test: waited for)
        assert wait_until(lambda: f"No endpoint known for leader {LEADER}" in b.log_text())
        # The metadata now names broker 7's endpoint: the follower's fetcher comes.
        st = UpdateMetadataPartitionState(t, 0, new_ce, LEADER, e1, (LEADER,), e1, (LEADER, 0))
        endpoints = (self_endpoint(b), BrokerEndpoint(LEADER, "127.0.0.1",
                                                      leader.getsockname()[1]))
        resp = send(bs, UpdateMetadataRequest(0, new_ce, be, (st,), endpoints, {t: tid}))
        assert resp == UpdateMetadataResponse(ErrorCode.none)
        try:
            conn, _ = leader.accept()
        except TimeoutError:
            raise AssertionError("the follower never connected to its leader") from None
        conn.close()
