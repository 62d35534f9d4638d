"""Which node fires which schedule: rendezvous hashing over the live nodes.

Every node computes the same answer from the same member list, so no node has to tell
the others. With ``n`` members serving a schedule's queue, each owns about ``1/n`` of
those schedules, and a member joining or leaving moves only the schedules it gains or
gives up. The member with the second highest hash is the schedule's *standby*: it fires an
occurrence the owner left unclaimed (see :mod:`django_htask.cluster`).

Pure Python: no Django import.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from .queues import ALL, DEFAULT_QUEUE, QueueFilter

__all__ = ["Partition"]

_MASK = (1 << 64) - 1


def _mix(value: int) -> int:
    """SplitMix64's finaliser: a fast, well-spread 64-bit hash of an integer."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def _seed(member: str) -> int:
    return int.from_bytes(hashlib.blake2b(member.encode(), digest_size=8).digest(), "big")


class Partition:
    """Which schedules a node owns among ``members`` (rendezvous hashing).

    ``members`` are node ids, or node id -> the queues it serves: a schedule is shared
    only among the members serving its queue."""

    __slots__ = ("_eligible", "_queues", "_seeds", "members", "node_id")

    def __init__(
        self,
        node_id: str,
        members: Sequence[str] | Mapping[str, QueueFilter],
        queues: QueueFilter = ALL,
    ) -> None:
        served = dict(members) if isinstance(members, Mapping) else dict.fromkeys(members, ALL)
        served.setdefault(node_id, queues)
        self.node_id = node_id
        self.members = tuple(sorted(served))
        self._queues = [served[m] for m in self.members]
        self._seeds = [_seed(m) for m in self.members]
        self._eligible: dict[str, tuple[int, ...]] = {}

    def serving(self, queue: str) -> tuple[int, ...]:
        """The indexes of the members that serve ``queue``."""
        found = self._eligible.get(queue)
        if found is None:
            found = tuple(i for i, q in enumerate(self._queues) if q.serves(queue))
            self._eligible[queue] = found
        return found

    def _ranked(self, schedule_id: int, queue: str) -> tuple[int, int]:
        """The indexes of the owner and the standby (-1 when there is none)."""
        key = _mix(schedule_id)
        best = second = -1
        best_i = second_i = -1
        for i in self.serving(queue):
            score = _mix(self._seeds[i] ^ key)
            if score > best:
                second, second_i = best, best_i
                best, best_i = score, i
            elif score > second:
                second, second_i = score, i
        return best_i, second_i

    def owner(self, schedule_id: int, queue: str = DEFAULT_QUEUE) -> str | None:
        """The member that owns ``schedule_id`` (None: no member serves its queue)."""
        best, _second = self._ranked(schedule_id, queue)
        return self.members[best] if best >= 0 else None

    def owns(self, schedule_id: int, queue: str = DEFAULT_QUEUE) -> bool:
        return self.owner(schedule_id, queue) == self.node_id

    def role(self, schedule_id: int, queue: str = DEFAULT_QUEUE) -> str | None:
        """This node's part in ``schedule_id``: "" if it owns it, the owner's id if it
        is its standby (the member with the second highest hash), else None."""
        best, second = self._ranked(schedule_id, queue)
        if best < 0:
            return None
        if self.members[best] == self.node_id:
            return ""
        return self.members[best] if second >= 0 and self.members[second] == self.node_id else None
