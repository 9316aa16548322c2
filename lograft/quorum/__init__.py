"""Cluster metadata: records, the immutable image, controller decisions, Raft adapter."""
