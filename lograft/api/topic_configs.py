"""Validation of topic configs before they reach the controller.

A topic config is committed to the metadata log and then applied by every
broker that hosts the topic; a value a broker cannot use would break its
replicas. So every key and value is checked here, at the edge, with the same
code the broker uses (`lograft.storage.config.log_config` for log settings).
(The pure controller cannot import storage; see docs/architecture.md.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lograft.echo import clip, shown
from lograft.errors import InvalidConfigError
from lograft.storage.config import config_keys, log_config

# A replica count as text: at most 9 digits (int() of any of them is cheap).
_SMALL_INT = re.compile(r"[0-9]{1,9}")

# Topic configs that are not log settings.
BROKER_KEYS = {"min_insync_replicas"}
CONTROLLER_KEYS = {"unclean_leader_election"}


# Kafka's names that are not ours with dots for underscores.
KAFKA_ALIASES = {"unclean.leader.election.enable": "unclean_leader_election"}


def known_topic_config_keys() -> list[str]:
    return sorted({*config_keys(), *BROKER_KEYS, *CONTROLLER_KEYS})


def canonical_key(key: Any) -> Any:
    """Our name of a topic config given in Kafka's spelling (`retention.ms`,
    `min.insync.replicas`, `unclean.leader.election.enable`): people and tools
    coming from Kafka write those. Anything else is returned as given, so an
    unknown key is refused under the name the caller used."""
    if not isinstance(key, str) or "." not in key:
        return key
    ours = KAFKA_ALIASES.get(key, key.replace(".", "_"))
    return ours if ours in known_topic_config_keys() else key


def validate_topic_configs(
    configs: Mapping[str, Any], replication_factor: int | None = None
) -> dict[str, str | None]:
    """Check names and values; returns them as the strings the metadata stores.

    A None value (delete the key) is always allowed for a known key. Kafka's
    dotted names are taken as ours (`canonical_key`); the answer uses ours, and
    a key given in both spellings is refused.
    `min_insync_replicas` may not exceed the topic's replication factor (when
    known): acks=all could never succeed.
    """
    out: dict[str, str | None] = {}
    log_values: dict[str, Any] = {}
    for given, value in configs.items():
        key = canonical_key(given)
        if key in out:
            raise InvalidConfigError(
                f"topic config {key} is given twice (as {shown(given)} and under "
                "another spelling); give it once",
                key=key,
            )
        if key not in known_topic_config_keys():
            raise InvalidConfigError(
                f"unknown topic config {shown(key)}; known: {', '.join(known_topic_config_keys())}",
                key=clip(str(key)),
            )
        if value is None:
            out[key] = None
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if key == "min_insync_replicas":
            # ASCII digits only: str.isdigit() also takes '²', which int() refuses.
            if not _SMALL_INT.fullmatch(text) or int(text) < 1:
                raise InvalidConfigError(
                    f"min_insync_replicas={shown(value)} must be an integer >= 1", key=key
                )
            if replication_factor is not None and int(text) > replication_factor:
                raise InvalidConfigError(
                    f"min_insync_replicas={text} exceeds the replication factor "
                    f"{replication_factor}: acks=all could never succeed",
                    key=key,
                )
        elif key in CONTROLLER_KEYS:
            if text not in ("true", "false"):
                raise InvalidConfigError(f"{key}={shown(value)} must be true or false", key=key)
        else:
            log_values[key] = text
        out[key] = text
    log_config(log_values)
    return out
