"""Go on after ranks die, without a restart: agree on the lost ranks, then apply a reshape;
later grow back when hosts return.

On a failure (a collective raised: a closed connection, or the groups' ``timeout`` passed),
every survivor calls, with the same ``generation`` (0 at the first failure, one more at each
call after):

>>> wait = timedelta(seconds=5)  # doctest: +SKIP
>>> lost = recovery.agree_lost(groups, generation=g, deadline=wait)  # doctest: +SKIP
>>> plan = topology.reshape(groups.topology, lost_ranks=lost, gpus_per_node=8)  # doctest: +SKIP
>>> groups = recovery.apply(groups, plan, generation=g)  # doctest: +SKIP

``agree_lost(groups, ...)`` answers in ``groups.topology``'s ranks, the numbering ``reshape``
reads, at every failure (after an ``apply`` the layout numbers the survivors from 0, no longer
by torch rank). ``apply`` returns None on a rank the new layout leaves idle: it should exit.

``agree_lost`` meets on the job's store (never in a collective); ``apply`` keeps every
communicator the reshape reuses and makes the others among survivors only. Create the first
groups with ``ProcessGroups.create(..., timeout=...)`` so that a collective with a dead peer
fails within that timeout instead of torch's 30 minutes.

When hosts return or spares arrive, every survivor and each new process (``groups`` None)
calls, with the same ``topology.grow`` plan and growth count ``n`` (0, 1, ...):

>>> plan = topology.grow(groups.topology, original)  # doctest: +SKIP
>>> call = {"generation": n, "store": store, "backend": "nccl"}  # doctest: +SKIP
>>> groups = recovery.grow(groups, plan, tensors, **call)  # doctest: +SKIP

``grow`` forms a new default group (torch cannot add processes to one) and the new layout's
groups, and moves each joining rank's weights from every holder of its shard at once; the
survivors keep theirs in memory.
"""

from ._apply import apply
from ._grow import grow
from ._lost import agree_lost

__all__ = ["agree_lost", "apply", "grow"]
