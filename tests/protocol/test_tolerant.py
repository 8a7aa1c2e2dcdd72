"""The tolerant kio reader: parity with kio's native reader, and skipping unknown tagged fields."""

from __future__ import annotations

import datetime
import io
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.describe_topic_partitions.v0 import request as dtp_v0
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.fetch.v15 import request as fetch_v15
from kio.schema.metadata.v1 import request as metadata_v1
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.produce.v3 import request as produce_v3
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.types import BrokerId, TopicName, TransactionalId
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import BufferUnderflow
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from wherry.protocol.records import build_batch
from wherry.protocol.tolerant import DecodeError, read_entity_tolerant

UNKNOWN_TAG = b"\xe7\x07"  # uvarint(999)
UNKNOWN_FIELD = UNKNOWN_TAG + b"\x05" + b"hello"  # tag 999, 5 bytes


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def inject_unknown_tag(entity_bytes: bytes) -> bytes:
    """Add tag 999 to an encoded flexible entity whose tag section is empty (trailing 0)."""
    assert entity_bytes.endswith(b"\x00")
    return entity_bytes[:-1] + b"\x01" + UNKNOWN_FIELD


def inject_nested(full: bytes, nested: Any) -> bytes:
    nested_bytes = encode(nested)
    assert full.count(nested_bytes) == 1
    return full.replace(nested_bytes, inject_unknown_tag(nested_bytes))


def timeout(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


# ---------------------------------------------------------------------------------------------
# Sample entities
# ---------------------------------------------------------------------------------------------


def produce_v9_request() -> produce_v9.ProduceRequest:
    batch = build_batch([(b"k", b"v"), (None, b"x")], timestamp_ms=1_700_000_000_000)
    return produce_v9.ProduceRequest(
        transactional_id=TransactionalId("tx-1"),
        acks=i16(-1),
        timeout=timeout(30_000),
        topic_data=(
            produce_v9.TopicProduceData(
                name=TopicName("orders"),
                partition_data=(
                    produce_v9.PartitionProduceData(index=i32(0), records=Records(batch)),
                    produce_v9.PartitionProduceData(index=i32(1001), records=None),
                ),
            ),
        ),
    )


def fetch_v12_request(cluster_id: str | None = None) -> fetch_v12.FetchRequest:
    return fetch_v12.FetchRequest(
        cluster_id=cluster_id,
        max_wait=timeout(500),
        min_bytes=i32(1),
        max_bytes=i32(52_428_800),
        isolation_level=i8(1),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            fetch_v12.FetchTopic(
                topic=TopicName("orders"),
                partitions=(
                    fetch_v12.FetchPartition(
                        partition=i32(3),
                        current_leader_epoch=i32(7),
                        fetch_offset=i64(12345),
                        last_fetched_epoch=i32(6),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1_048_576),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(
            fetch_v12.ForgottenTopic(topic=TopicName("old"), partitions=(i32(1), i32(2))),
        ),
        rack_id="rack-a",
    )


def fetch_v15_request(*, with_tags: bool = False) -> fetch_v15.FetchRequest:
    return fetch_v15.FetchRequest(
        cluster_id="cluster-xyz" if with_tags else None,
        replica_state=(
            fetch_v15.ReplicaState(replica_id=BrokerId(2), replica_epoch=i64(9))
            if with_tags
            else fetch_v15.ReplicaState()
        ),
        max_wait=timeout(100),
        min_bytes=i32(1),
        max_bytes=i32(1000),
        isolation_level=i8(0),
        session_id=i32(5),
        session_epoch=i32(2),
        topics=(
            fetch_v15.FetchTopic(
                topic_id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
                partitions=(
                    fetch_v15.FetchPartition(
                        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(100)
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def metadata_v12_request() -> metadata_v12.MetadataRequest:
    return metadata_v12.MetadataRequest(
        topics=(
            metadata_v12.MetadataRequestTopic(topic_id=None, name=TopicName("a")),
            metadata_v12.MetadataRequestTopic(
                topic_id=uuid.UUID("00000000-0000-0000-0000-000000000001"), name=None
            ),
        ),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )


def api_versions_v3_request() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="wherry-test", client_software_version="1.0")


def create_topics_v7_request() -> create_topics_v7.CreateTopicsRequest:
    return create_topics_v7.CreateTopicsRequest(
        topics=(
            create_topics_v7.CreatableTopic(
                name=TopicName("t1"),
                num_partitions=i32(-1),
                replication_factor=i16(-1),
                assignments=(
                    create_topics_v7.CreatableReplicaAssignment(
                        partition_index=i32(0), broker_ids=(BrokerId(1), BrokerId(2))
                    ),
                ),
                configs=(
                    create_topics_v7.CreatableTopicConfig(name="cleanup.policy", value="compact"),
                    create_topics_v7.CreatableTopicConfig(name="retention.ms", value=None),
                ),
            ),
        ),
        timeout=timeout(60_000),
        validate_only=False,
    )


def request_header_v2() -> RequestHeaderV2:
    return RequestHeaderV2(
        request_api_key=i16(0), request_api_version=i16(9), correlation_id=i32(42), client_id="c"
    )


def describe_topic_partitions_request(cursor: bool) -> dtp_v0.DescribeTopicPartitionsRequest:
    return dtp_v0.DescribeTopicPartitionsRequest(
        topics=(dtp_v0.TopicRequest(name=TopicName("a")),),
        response_partition_limit=i32(10),
        cursor=dtp_v0.Cursor(topic_name=TopicName("a"), partition_index=i32(4)) if cursor else None,
    )


SAMPLES: dict[str, Any] = {
    "produce_v9": produce_v9_request(),
    "fetch_v12": fetch_v12_request(),
    "fetch_v12_cluster_id": fetch_v12_request("cid"),
    "fetch_v15": fetch_v15_request(),
    "fetch_v15_tags": fetch_v15_request(with_tags=True),
    "metadata_v12": metadata_v12_request(),
    "metadata_v12_all_topics": metadata_v12.MetadataRequest(
        topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False
    ),
    "api_versions_v3": api_versions_v3_request(),
    "create_topics_v7": create_topics_v7_request(),
    "request_header_v2": request_header_v2(),
    "request_header_v2_null_client": RequestHeaderV2(
        request_api_key=i16(18), request_api_version=i16(3), correlation_id=i32(1), client_id=None
    ),
    "request_header_v1": RequestHeaderV1(
        request_api_key=i16(3), request_api_version=i16(1), correlation_id=i32(7), client_id="x"
    ),
    "dtp_cursor": describe_topic_partitions_request(cursor=True),
    "dtp_no_cursor": describe_topic_partitions_request(cursor=False),
    "metadata_v1_legacy": metadata_v1.MetadataRequest(
        topics=(metadata_v1.MetadataRequestTopic(name=TopicName("a")),)
    ),
    "metadata_v1_null_topics": metadata_v1.MetadataRequest(topics=None),
    "produce_v3_legacy": produce_v3.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=timeout(1000),
        topic_data=(
            produce_v3.TopicProduceData(
                name=TopicName("t"),
                partition_data=(
                    produce_v3.PartitionProduceData(
                        index=i32(0), records=Records(build_batch([(b"k", b"v")], timestamp_ms=5))
                    ),
                ),
            ),
        ),
    ),
}


# ---------------------------------------------------------------------------------------------
# Parity with the native reader
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip_matches_native(name: str) -> None:
    entity = SAMPLES[name]
    data = encode(entity)
    native = entity_reader(type(entity))(data, 0)
    ours = read_entity_tolerant(type(entity), data)
    assert ours == native
    assert ours == (entity, len(data))


@pytest.mark.parametrize("name", ["produce_v9", "fetch_v15_tags", "request_header_v2"])
def test_offset_and_buffer_types(name: str) -> None:
    entity = SAMPLES[name]
    data = b"\xffJUNK" + encode(entity) + b"trailing"
    native = entity_reader(type(entity))(data, 5)
    for buf in (data, bytearray(data), memoryview(data)):
        assert read_entity_tolerant(type(entity), buf, 5) == native
        assert read_entity_tolerant(type(entity), buf, 5)[1] == len(encode(entity))


def test_header_then_body_in_one_frame() -> None:
    header = request_header_v2()
    body = produce_v9_request()
    frame = encode(header) + encode(body)
    h, used = read_entity_tolerant(RequestHeaderV2, frame, 0)
    b, used2 = read_entity_tolerant(produce_v9.ProduceRequest, frame, used)
    assert (h, b) == (header, body)
    assert used + used2 == len(frame)


# ---------------------------------------------------------------------------------------------
# Unknown tagged fields
# ---------------------------------------------------------------------------------------------


def _assert_native_rejects_and_we_accept(entity: Any, data: bytes) -> None:
    with pytest.raises(KeyError, match="Unknown tagged field tag: 999"):
        entity_reader(type(entity))(data, 0)
    assert read_entity_tolerant(type(entity), data) == (entity, len(data))


@pytest.mark.parametrize(
    "name",
    [
        "produce_v9",
        "fetch_v12",
        "fetch_v15",
        "metadata_v12",
        "api_versions_v3",
        "create_topics_v7",
        "request_header_v2",
        "request_header_v2_null_client",
        "dtp_cursor",
    ],
)
def test_unknown_top_level_tag_is_skipped(name: str) -> None:
    entity = SAMPLES[name]
    _assert_native_rejects_and_we_accept(entity, inject_unknown_tag(encode(entity)))


def _part(sample: str, path: Callable[[Any], Any]) -> tuple[Any, Any]:
    """A sample entity and the nested entity of it that `path` picks."""
    return SAMPLES[sample], path(SAMPLES[sample])


NESTED: dict[str, tuple[Any, Any]] = {
    "produce_v9_topic": _part("produce_v9", lambda e: e.topic_data[0]),
    "produce_v9_partition": _part("produce_v9", lambda e: e.topic_data[0].partition_data[1]),
    "fetch_v12_partition": _part("fetch_v12", lambda e: e.topics[0].partitions[0]),
    "fetch_v12_forgotten": _part("fetch_v12", lambda e: e.forgotten_topics_data[0]),
    "fetch_v15_topic": _part("fetch_v15", lambda e: e.topics[0]),
    "metadata_v12_topic": _part("metadata_v12", lambda e: e.topics[1]),
    "create_topics_v7_config": _part("create_topics_v7", lambda e: e.topics[0].configs[0]),
    "create_topics_v7_assignment": _part("create_topics_v7", lambda e: e.topics[0].assignments[0]),
    "dtp_nullable_cursor": _part("dtp_cursor", lambda e: e.cursor),
}


@pytest.mark.parametrize("name", sorted(NESTED))
def test_unknown_nested_tag_is_skipped(name: str) -> None:
    entity, nested = NESTED[name]
    _assert_native_rejects_and_we_accept(entity, inject_nested(encode(entity), nested))


def test_unknown_tags_everywhere_at_once() -> None:
    entity = SAMPLES["create_topics_v7"]
    data = encode(entity)
    topic = entity.topics[0]
    for nested in (topic.configs[0], topic.configs[1], topic.assignments[0]):
        data = inject_nested(data, nested)
    data = inject_unknown_tag(data)
    _assert_native_rejects_and_we_accept(entity, data)


def _tag_section(entity: Any, without_tags: Any) -> tuple[bytes, bytes]:
    """Split the encoding of ``entity`` into (body, top-level tag section)."""
    body = encode(without_tags)[:-1]
    full = encode(entity)
    assert full.startswith(body)
    return body, full[len(body) :]


def test_unknown_tag_alongside_known_tags() -> None:
    entity = SAMPLES["fetch_v15_tags"]
    body, tags = _tag_section(entity, SAMPLES["fetch_v15"])
    assert tags[0] == 2  # cluster_id (tag 0) and replica_state (tag 1)
    data = body + b"\x03" + tags[1:] + UNKNOWN_FIELD
    _assert_native_rejects_and_we_accept(entity, data)
    # Unknown tag placed between the known ones (tag ordering is not enforced on read).
    cluster_tag = b"\x00" + bytes([12]) + bytes([12]) + b"cluster-xyz"  # tag 0, size, string
    assert tags[1:].startswith(cluster_tag)
    data = body + b"\x03" + cluster_tag + UNKNOWN_FIELD + tags[1 + len(cluster_tag) :]
    assert read_entity_tolerant(fetch_v15.FetchRequest, data) == (entity, len(data))


def test_known_tag_with_padding_uses_declared_size() -> None:
    entity = SAMPLES["fetch_v12_cluster_id"]
    body, _ = _tag_section(entity, SAMPLES["fetch_v12"])
    # cluster_id "cid" (compact string: len+1=4, 'cid') declared as 6 bytes: 2 trailing bytes.
    data = body + b"\x01" + b"\x00" + b"\x06" + b"\x04cid" + b"\xaa\xbb"
    assert read_entity_tolerant(fetch_v12.FetchRequest, data) == (entity, len(data))


def test_known_tag_overrunning_declared_size_is_an_error() -> None:
    entity = SAMPLES["fetch_v12_cluster_id"]
    body, _ = _tag_section(entity, SAMPLES["fetch_v12"])
    data = body + b"\x01" + b"\x00" + b"\x02" + b"\x04cid"
    with pytest.raises(DecodeError):
        read_entity_tolerant(fetch_v12.FetchRequest, data)


def test_missing_tagged_fields_get_defaults() -> None:
    data = encode(SAMPLES["fetch_v15"])
    entity, _ = read_entity_tolerant(fetch_v15.FetchRequest, inject_unknown_tag(data))
    assert entity.cluster_id is None
    assert entity.replica_state == fetch_v15.ReplicaState()


# ---------------------------------------------------------------------------------------------
# Malformed input
# ---------------------------------------------------------------------------------------------


def test_decode_error_is_value_error_and_kio_decode_error() -> None:
    from kio.serial.errors import DecodeError as KioDecodeError

    assert issubclass(DecodeError, ValueError)
    assert issubclass(DecodeError, KioDecodeError)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_truncation_raises_decode_error(name: str) -> None:
    entity = SAMPLES[name]
    data = encode(entity)
    if type(entity).__flexible__ and data.endswith(b"\x00"):
        data = inject_unknown_tag(data)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            read_entity_tolerant(type(entity), data[:cut])


def test_unknown_tag_overrunning_buffer() -> None:
    data = encode(SAMPLES["api_versions_v3"])[:-1] + b"\x01" + UNKNOWN_TAG + b"\x7f" + b"abc"
    with pytest.raises(DecodeError):
        read_entity_tolerant(ApiVersionsRequest, data)


def test_huge_array_length_is_rejected_quickly() -> None:
    # Legacy array of 2**31-1 topics with no data behind it.
    data = b"\x7f\xff\xff\xff"
    with pytest.raises(DecodeError):
        read_entity_tolerant(metadata_v1.MetadataRequest, data)
    # Compact array length uvarint(2**32 - 1) + empty.
    data = b"\xff\xff\xff\xff\x0f"
    with pytest.raises(DecodeError):
        read_entity_tolerant(metadata_v12.MetadataRequest, data)


def test_negative_legacy_array_length() -> None:
    with pytest.raises(DecodeError):
        read_entity_tolerant(metadata_v1.MetadataRequest, b"\xff\xff\xff\xfe")


def test_bad_offset() -> None:
    with pytest.raises(DecodeError):
        read_entity_tolerant(ApiVersionsRequest, b"\x00", 5)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200))
def test_fuzz_garbage_only_raises_decode_error(data: bytes) -> None:
    for entity_type in (
        produce_v9.ProduceRequest,
        fetch_v15.FetchRequest,
        create_topics_v7.CreateTopicsRequest,
        metadata_v1.MetadataRequest,
        RequestHeaderV2,
        dtp_v0.DescribeTopicPartitionsRequest,
    ):
        try:
            entity, size = read_entity_tolerant(entity_type, data)
        except DecodeError:
            continue
        assert 0 <= size <= len(data)
        assert isinstance(entity, entity_type)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fuzz_mutated_encoding(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(SAMPLES)))
    entity = SAMPLES[name]
    encoded = bytearray(encode(entity))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(encoded) - 1))
        encoded[pos] = data.draw(st.integers(0, 255))
    try:
        read_entity_tolerant(type(entity), bytes(encoded))
    except DecodeError:
        pass


def test_buffer_underflow_never_leaks() -> None:
    # BufferUnderflow from kio's primitive readers is wrapped, but still catchable as kio's
    # DecodeError family.
    with pytest.raises(DecodeError) as info:
        read_entity_tolerant(RequestHeaderV2, b"\x00")
    assert not isinstance(info.value, BufferUnderflow)
    assert isinstance(info.value.__cause__, BufferUnderflow)
