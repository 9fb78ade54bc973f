"""The project's exception tree and Kafka's error codes.

Every error pylog raises on purpose derives from :class:`PylogError`, so callers can catch one type::

    PylogError
     +-- ProtocolError               malformed bytes on the wire or in a record batch
     |    +-- CorruptRecordError     a record batch failed a structural or CRC check
     |    +-- UnsupportedVersionError an API version or record magic we do not speak
     |    +-- CorrelationIdMismatchError a response answering another request than the oldest pending one
     +-- StorageError                the partition log could not do what was asked
     |    +-- OffsetOutOfRangeError  an offset outside [log start, log end]
     |    +-- CorruptIndexError      an index file that breaks its invariants
     |    +-- CorruptSnapshotError   a producer-state snapshot that fails its version, size or CRC check
     |    +-- SegmentGoneError       a segment deleted (retention) while a read-only reader needed it
     |    +-- ProducerStateError     an idempotent batch out of sequence or from a fenced epoch (``code``)
     +-- KafkaError                  a broker answered with a non-zero error code
     |    +-- BrokerConnectionError  the TCP connection to a broker failed (code NETWORK_EXCEPTION)
     |    +-- TopicError             a topic or metadata operation refused (its code and message go to the client)
     +-- ConfigError (ValueError)    a bad configuration value; the message names the key
     |    +-- WorkerPythonError      Spark's Python workers would not find pylog (connector, driver side)
     +-- MessageDefinitionError (ValueError) a wire-protocol message definition that breaks the schema rules
     +-- InvalidArgumentError (ValueError) a function called with a value it cannot take (caller's bug)
     +-- InvalidTypeError (TypeError) a function called with an argument of a type it cannot take
     +-- IllegalStateError (RuntimeError) a component used in a state that forbids it (e.g. shut down)
     +-- WaitTimeoutError (TimeoutError) a bounded wait ran out (broker start/stop, the cluster-file lock)
     +-- BrokerStartError            a launched broker exited (or stayed silent) before listening
     +-- EmbeddedBrokerError         the embedded broker of a data directory could not start, be reached or stop
     +-- ClusterSupervisorError      ``pylog-broker cluster``'s supervisor cannot run, or a ``node`` command got no answer
     +-- UnknownTopicError           a topic or partition a read names does not exist (connector)
     +-- DataLossError               offsets a read needs are not in the log (connector)
     +-- ProduceFailedError          a write task could not deliver its records (connector)
     +-- InputDataError              a row of a written DataFrame cannot be written, e.g. a null topic
     +-- StreamingSinkError          the exactly-once streaming sink cannot keep its guarantee (its log in the
     |                               checkpoint is unusable, or a prepared micro-batch cannot be finished)
     +-- InjectedFailure             raised by the connector's test-only fault injection, never otherwise

Error codes are Kafka's own numbers (``clients/.../common/protocol/Errors.java``).
"""

from __future__ import annotations

import enum

__all__ = [
    "BrokerConnectionError",
    "BrokerStartError",
    "ClusterSupervisorError",
    "ConfigError",
    "CorruptIndexError",
    "CorrelationIdMismatchError",
    "CorruptRecordError",
    "CorruptSnapshotError",
    "EmbeddedBrokerError",
    "DataLossError",
    "ErrorCode",
    "InjectedFailure",
    "IllegalStateError",
    "InputDataError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "KafkaError",
    "MessageDefinitionError",
    "OffsetOutOfRangeError",
    "ProducerStateError",
    "ProduceFailedError",
    "ProtocolError",
    "PylogError",
    "SegmentGoneError",
    "StorageError",
    "StreamingSinkError",
    "TopicError",
    "TransactionCommitError",
    "UnknownTopicError",
    "UnsupportedVersionError",
    "WaitTimeoutError",
    "WorkerPythonError",
]


class ErrorCode(enum.IntEnum):
    """Kafka protocol error codes used by pylog (subset of Errors.java)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    FENCED_LEADER_EPOCH = 74
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    #: KIP-848: the member's epoch is not the coordinator's; it gives up its partitions and rejoins
    FENCED_MEMBER_EPOCH = 110
    #: KIP-848: a static member's instance id is still held by a member that did not leave with epoch -2
    UNRELEASED_INSTANCE_ID = 111
    #: KIP-848: the ServerAssignor asked for is not in group.consumer.assignors
    UNSUPPORTED_ASSIGNOR = 112
    #: KIP-848: an offset commit from a consumer group member at another epoch than its own
    STALE_MEMBER_EPOCH = 113
    #: KIP-890: the producer must abort its transaction (never answered by pylog; Apache Kafka may send it)
    TRANSACTION_ABORTABLE = 120
    #: KIP-848: a consumer group member's SubscribedTopicRegex does not compile (or uses what pylog refuses)
    INVALID_REGULAR_EXPRESSION = 128

    @property
    def retriable(self) -> bool:
        """True for the codes Kafka's Java client retries (RetriableException subclasses)."""
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    }
)


class PylogError(Exception):
    """Base class of every error pylog raises on purpose."""


class ProtocolError(PylogError):
    """Bytes that do not follow the Kafka wire or record format."""


class CorruptRecordError(ProtocolError):
    """A record batch or record failed a structural or checksum check.

    The message says which field held which value and where (byte position), e.g.
    ``"batch at position 0: CRC-32C 0x1234abcd does not match computed 0xdeadbeef"``. ``record_index`` is
    the index within its batch of the record to blame, when one is (None otherwise).
    """

    record_index: int | None = None


class DecompressionLimitError(CorruptRecordError):
    """A compressed records section expands beyond the bound its reader allows (``limit`` bytes): a
    decompression bomb, or a batch larger than the broker accepts once decompressed."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class UnsupportedVersionError(ProtocolError):
    """An API version, record magic or compression codec pylog does not speak."""


class CorrelationIdMismatchError(ProtocolError):
    """A response whose correlation id is not the one of the oldest request awaiting an answer (Kafka's
    ``CorrelationIdMismatchException``): the connection's byte stream is out of step and must be closed."""


class StorageError(PylogError):
    """The partition log could not perform the requested operation."""


class InconsistentTopicIdError(StorageError):
    """A partition directory's ``partition.metadata`` names another topic id than the one its topic has (Kafka's
    ``InconsistentTopicIdException``): the directory belongs to another incarnation of the topic."""


class LogDirOfflineError(StorageError):
    """The log directories failed earlier (a write the disk refused): every later read and write of a log is
    refused at once (Kafka's ``KafkaStorageException`` for an offline log dir), answered KAFKA_STORAGE_ERROR."""


class OffsetOutOfRangeError(StorageError):
    """An offset outside the log's [log start offset, log end offset] range."""


class CorruptIndexError(StorageError):
    """An offset or time index file that violates its invariants."""


# --- storage ---


class CorruptSnapshotError(StorageError):
    """A producer-state ``.snapshot`` file whose version, size or CRC-32C is wrong (the loader skips it)."""


class SegmentGoneError(StorageError):
    """A segment file vanished (retention or compaction) while a read-only reader needed it."""


class ProducerStateError(StorageError):
    """The partition's producer state rejects an idempotent batch; nothing was appended.

    ``code`` is the answer Kafka gives: ``OUT_OF_ORDER_SEQUENCE_NUMBER`` or ``INVALID_PRODUCER_EPOCH``.
    """

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class KafkaError(PylogError):
    """A broker answered with a non-zero error code."""

    def __init__(self, code: ErrorCode | int, message: str = "") -> None:
        try:
            self.code: ErrorCode | int = ErrorCode(code)
            name = self.code.name
        except ValueError:
            self.code = code
            name = f"UNKNOWN_ERROR_CODE_{code}"
        self.name = name
        super().__init__(f"{name} ({int(code)})" + (f": {message}" if message else ""))

    @property
    def retriable(self) -> bool:
        return isinstance(self.code, ErrorCode) and self.code.retriable


class TopicError(KafkaError):
    """A topic operation failed with a Kafka error code (``code``) and a message for the client (``detail``):
    raised by the broker's topic rules and by the controller's metadata operations alike."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(code, message)
        self.detail = message


# --- connections to a broker (client and replica fetcher) ---


class BrokerConnectionError(KafkaError):
    """The TCP connection to a broker failed; the message names ``host:port`` and what happened.

    A :class:`KafkaError` with code NETWORK_EXCEPTION (retriable), as Kafka's clients treat a broken
    connection. ``address`` is ``host:port``; ``detail`` what happened (``"connection closed by the broker"``).
    """

    def __init__(self, address: str, message: str) -> None:
        self.address = address
        self.detail = message
        super().__init__(ErrorCode.NETWORK_EXCEPTION, f"broker {address}: {message}")


class ConfigError(PylogError, ValueError):
    """A configuration value that cannot be used; the message names the key and the allowed values."""


# --- protocol: message definitions ---


class MessageDefinitionError(PylogError, ValueError):
    """A wire-protocol message definition (``protocol.messages``) that breaks the schema rules, e.g. a field of
    an unknown type; raised when the definition is built, so at import time for pylog's own messages."""


# --- misuse and waits (any package) ---


class InvalidArgumentError(PylogError, ValueError):
    """A function was called with a value it cannot take: a bug in the caller. The message names the argument."""


class InvalidTypeError(PylogError, TypeError):
    """A function was called with an argument of a type it cannot take; the message names argument and type."""


class IllegalStateError(PylogError, RuntimeError):
    """A component was used in a state that forbids it (a timer or purgatory after shutdown, a started broker)."""


class WaitTimeoutError(PylogError, TimeoutError):
    """A bounded wait ran out (a broker that does not start or stop in time, the cluster file's lock)."""


# --- launcher ---


class BrokerStartError(PylogError):
    """A broker child process exited, or never printed ``listening on HOST:PORT``, while starting.

    The first line of the message states the cause (the broker's own one-line error when it printed one); the
    tail of the broker's log follows.
    """


class EmbeddedBrokerError(PylogError):
    """The embedded broker of a data directory could not be started, reached or stopped.

    The first line of the message states the cause; when the broker failed to start, its log's tail follows.
    """


class ClusterSupervisorError(PylogError):
    """The supervisor of ``pylog-broker cluster`` cannot run (its cluster directory is supervised already), or a
    ``pylog-broker node`` request found no supervisor or got no answer; the message says which and why."""


# --- connector ---


class WorkerPythonError(ConfigError):
    """The Python interpreter Spark starts for its workers cannot import pylog; names the interpreter and the fix."""


class UnknownTopicError(PylogError):
    """A subscribed or assigned topic / partition does not exist on the broker."""


class DataLossError(PylogError):
    """Offsets a read needs are no longer (or not yet) in the log, and ``failOnDataLoss`` is true."""


class ProduceFailedError(PylogError):
    """A write task could not deliver its records; the message names topic, partition and the error."""


class TransactionCommitError(PylogError):
    """Committing (or aborting) the transactions of a write failed for some of them; the one-line message names
    the transactional ids, the error of each and what to do. ``failed`` maps transactional id -> the error."""

    def __init__(self, message: str, failed: dict[str, KafkaError] | None = None) -> None:
        super().__init__(message)
        self.failed: dict[str, KafkaError] = dict(failed or {})


class InputDataError(PylogError):
    """A row of the DataFrame being written cannot be written (e.g. a null ``topic``); found at task time."""


class StreamingSinkError(PylogError):
    """The exactly-once streaming sink cannot keep its guarantee: its log under the query's checkpoint cannot be
    read or written, or a micro-batch recorded as prepared cannot be finished (its transactions were aborted)."""


class InjectedFailure(PylogError):
    """Raised by the connector's test-only ``pylog.test.*`` fault injection; never in production."""
