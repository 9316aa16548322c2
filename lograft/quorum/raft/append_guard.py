"""Keeps a follower from truncating log entries that match its leader's.

pysyncobj 0.3.17's follower, on an `append_entries` whose `prevLogIdx`
matches, deletes *every* entry after `prevLogIdx` and appends the message's
entries, without comparing terms (`SyncObj.__onMessageReceived`). Raft deletes
only from the first entry that conflicts (same index, other term; Ongaro and
Ousterhout, Figure 2, AppendEntries step 3), because a leader may send a
follower entries it already has: pysyncobj's leader moves its next index for
a follower back on every `reset` answer, and after a stall several resets are
in flight, so it re-sends from an old index. When the re-sent batch is shorter
than the follower's log (one batch is at most `appendEntriesBatchSizeBytes`),
the follower drops entries it has already acknowledged, and applied: then it
logs "truncating already-applied log entries" (CRITICAL). An entry the leader
counted toward a commit with that acknowledgement is then on one disk fewer;
if the leader dies before re-sending it and the remaining majority lacks it,
a committed entry is lost and the nodes that applied it diverge.

`keep_matching_tail` rewrites such a message before pysyncobj reads it, to
Raft's rule: the entries it carries that the follower already holds (same
index, same term) are dropped from it and `prevLogIdx` moves past them, so
pysyncobj deletes only from the first entry that is missing or conflicts.
When it carries nothing new and the follower's log goes on with entries of
the message's own term, it becomes a heartbeat at the follower's last entry
and pysyncobj truncates nothing; acknowledging that entry is true, since an
entry of term T can only come from term T's one leader, which never removes
its own entries. A tail that starts with entries of an earlier term is still
truncated by pysyncobj (they may conflict with the leader's log and nothing
here can tell): that needs a stall across an election and a tail longer than
one batch. Re-sent entries that all match no longer rewrite the journal nor
log the CRITICAL line; it now means a real conflict with applied entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# (index -> (command, index, term) or None when not in the log), last index.
EntryAt = Callable[[int], "tuple[Any, int, int] | None"]


def keep_matching_tail(
    message: dict[str, Any], entry_at: EntryAt, last_index: int, current_term: int
) -> dict[str, Any]:
    """`message` as pysyncobj may safely apply it to this follower's log."""
    if message.get("type") != "append_entries":
        return message
    if "prevLogIdx" not in message or "transmission" in message:
        return message
    term = message.get("term")
    if not isinstance(term, int) or term < current_term:
        return message  # pysyncobj ignores it anyway
    prev, prev_term = message["prevLogIdx"], message.get("prevLogTerm")
    ours = entry_at(prev)
    if ours is None or ours[2] != prev_term:
        return message  # pysyncobj answers with a reset: leave it to it
    entries = list(message.get("entries") or [])
    held = 0
    for entry in entries:
        mine = entry_at(entry[1])
        if mine is None or mine[2] != entry[2]:
            break
        held += 1
    if held == 0 and (entries or prev >= last_index):
        return message  # nothing re-sent: pysyncobj's handling is Raft's
    if held:
        prev, prev_term = entries[held - 1][1], entries[held - 1][2]
    rest = entries[held:]
    if not rest and prev < last_index:
        after = entry_at(prev + 1)
        if after is not None and after[2] == term:
            last = entry_at(last_index)
            assert last is not None and last[2] == term  # terms never go down along a log
            prev, prev_term = last_index, term
    if prev == message["prevLogIdx"]:
        return message
    rewritten = dict(message)
    rewritten["prevLogIdx"] = prev
    rewritten["prevLogTerm"] = prev_term
    rewritten["entries"] = rest
    return rewritten


def journal_entry_at(journal: Any) -> EntryAt:
    """`EntryAt` over a pysyncobj journal (a list-like of (command, index,
    term) whose first element may be past index 1 after compaction)."""

    def entry_at(index: int) -> tuple[Any, int, int] | None:
        if len(journal) == 0:
            return None
        first = journal[0][1]
        offset = index - first
        if offset < 0 or offset >= len(journal):
            return None
        entry: tuple[Any, int, int] = journal[offset]
        return entry

    return entry_at
