"""Broker errors as Kafka's tools print them: the Java exception's class and message
(`org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.`)."""

from __future__ import annotations

from confluent_kafka import KafkaError
from kio.schema.errors import ErrorCode

from wherry.cli import common

__all__ = ["kafka_error_message", "kafka_error_text", "kafka_exception_text"]

# Kafka's class and message for the errors users of the tools meet most
_JAVA: dict[int, tuple[str, str]] = {
    ErrorCode.offset_out_of_range: (
        "OffsetOutOfRangeException",
        "The requested offset is not within the range of offsets maintained by the server."),
    ErrorCode.unknown_topic_or_partition: ("UnknownTopicOrPartitionException",
                                           "This server does not host this topic-partition."),
    ErrorCode.coordinator_not_available: ("CoordinatorNotAvailableException",
                                          "The coordinator is not available."),
    ErrorCode.not_coordinator: ("NotCoordinatorException", "This is not the correct coordinator."),
    ErrorCode.coordinator_load_in_progress: (
        "CoordinatorLoadInProgressException",
        "The coordinator is loading and hence can't process requests."),
    ErrorCode.invalid_group_id: ("InvalidGroupIdException", "The configured groupId is invalid."),
    ErrorCode.unknown_member_id: ("UnknownMemberIdException",
                                  "The coordinator is not aware of this member."),
    ErrorCode.topic_authorization_failed: ("TopicAuthorizationException",
                                           "Topic authorization failed."),
    ErrorCode.group_authorization_failed: ("GroupAuthorizationException",
                                           "Group authorization failed."),
    ErrorCode.policy_violation: ("PolicyViolationException",
                                 "Request parameters do not satisfy the configured policy."),
    ErrorCode.non_empty_group: ("GroupNotEmptyException", "The group is not empty."),
    ErrorCode.group_id_not_found: ("GroupIdNotFoundException", "The group id does not exist."),
    ErrorCode.not_leader_or_follower: (
        "NotLeaderOrFollowerException",
        "For requests intended only for the leader, this error indicates that the broker is "
        "not the current leader. For requests intended for any replica, this error indicates "
        "that the broker is not a replica of the topic partition."),
    ErrorCode.cluster_authorization_failed: ("ClusterAuthorizationException",
                                             "Cluster authorization failed."),
    ErrorCode.transactional_id_not_found: ("TransactionalIdNotFoundException",
                                           "The transactionalId could not be found."),
    ErrorCode.transaction_coordinator_fenced: (
        "TransactionCoordinatorFencedException",
        "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the "
        "current coordinator for a given producer."),
    ErrorCode.group_subscribed_to_topic: (
        "GroupSubscribedToTopicException",
        "Deleting offsets of a topic is forbidden while the consumer group is actively "
        "subscribed to it."),
}

# Kafka's exception classes whose names are not the error's name in CamelCase
_CLASSES = {
    ErrorCode.kafka_storage_error: "KafkaStorageException",
    ErrorCode.unknown_server_error: "UnknownServerException",
    ErrorCode.invalid_topic_exception: "InvalidTopicException",
    ErrorCode.cluster_authorization_failed: "ClusterAuthorizationException",
}


def _java(code: int) -> tuple[str, str]:
    """Kafka's exception class and message for an error code: those above, else the class
    named after the error with its description."""
    if code in _JAVA:
        return _JAVA[code]
    error = ErrorCode(code)
    name = _CLASSES.get(error) or "".join(
        w.capitalize() for w in error.name.split("_")) + "Exception"
    # librdkafka carries Kafka's description of each broker error
    message = KafkaError(code).str().removeprefix("Broker: ")
    return name, message if not message or message.endswith(".") else f"{message}."


def kafka_error_text(code: int) -> str:
    """Kafka's exception for an error code, as Java prints it (class: message)."""
    name, message = _java(code)
    text = f"org.apache.kafka.common.errors.{name}"
    return f"{text}: {message}" if message else text


def kafka_error_message(code: int) -> str:
    """Kafka's exception message for an error code (its `getMessage()`)."""
    name, message = _java(code)
    return message or name


def kafka_exception_text(exc: BaseException) -> str:
    """A client call's failure: Kafka's text for the errors of `_JAVA`, else librdkafka's
    message."""
    code = common.kafka_error_code(exc)
    if code is not None and code in _JAVA:
        return kafka_error_text(code)
    return common.kafka_error_message(exc)
