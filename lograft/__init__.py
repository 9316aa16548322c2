"""lograft: a Kafka-style distributed commit log with KRaft-style metadata on Raft."""

__version__ = "0.1.0"
