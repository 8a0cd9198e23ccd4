"""Alpha-beta costs of the collectives a training step runs (private).

Algorithm: a message of ``S`` units over a link costs ``alpha + beta * S`` (latency plus size over
bandwidth). For a group of ``n`` ranks holding ``S`` units each (Thakur, Rabenseifner and Gropp,
"Optimization of collective communication operations in MPICH", 2005):

- ring all-reduce: ``2 (n - 1) (alpha + beta * S / n)``;
- ring all-gather and reduce-scatter: ``(n - 1) (alpha + beta * S / n)`` each;
- pairwise all-to-all: ``(n - 1) (alpha + beta * S / n)``;
- point-to-point send: ``alpha + beta * S``;
- hierarchical all-reduce of ``n = k * m`` ranks, ``m`` in each of ``k`` domains: a ring
  reduce-scatter inside every domain (``m`` ranks, inner link), a ring all-reduce of the
  ``S / m`` shard across the domains (``k`` ranks, outer link), a ring all-gather inside:
  ``2 (m - 1) (alpha_i + beta_i * S / m) + 2 (k - 1) (alpha_o + beta_o * S / n)``.

A group of one rank costs nothing.
"""

from __future__ import annotations

from ._fields import check_amount, check_count, check_instance
from ._hardware import Link

__all__ = [
    "all_gather",
    "all_reduce",
    "all_to_all",
    "hierarchical_all_reduce",
    "p2p",
    "reduce_scatter",
    "ring_all_gather",
    "ring_all_reduce",
    "send",
    "sequential_ring",
    "two_level_all_reduce",
]


def _checked(link: object, n: object, size: object) -> tuple[Link, int, float]:
    checked = check_instance("link", link, Link, "a Link, e.g. TOY_GPU.intra")
    return checked, check_count("n", n), check_amount("size", size)


def ring_all_reduce(link: Link, n: int, size: float) -> float:
    """:func:`all_reduce` without argument checks, for the estimate's inner loop."""
    return 2 * (n - 1) * (link.latency + size / n / link.bandwidth) if n > 1 else 0.0


def ring_all_gather(link: Link, n: int, size: float) -> float:
    """:func:`all_gather` without argument checks, for the estimate's inner loop."""
    return (n - 1) * (link.latency + size / n / link.bandwidth) if n > 1 else 0.0


def two_level_all_reduce(inner: Link, outer: Link, m: int, k: int, size: float) -> float:
    """:func:`hierarchical_all_reduce` without argument checks, for the estimate's inner loop."""
    return 2 * ring_all_gather(inner, m, size) + ring_all_reduce(outer, k, size / m)


def send(link: Link, size: float) -> float:
    """:func:`p2p` without argument checks, for the estimate's inner loop."""
    return link.latency + size / link.bandwidth


def all_reduce(link: Link, n: int, size: float) -> float:
    """Ring all-reduce of ``size`` units over ``n`` ranks.

    >>> from topology.cost import TOY_GPU
    >>> round(all_reduce(TOY_GPU.intra, 4, 500.0), 6)
    7.8
    """
    return ring_all_reduce(*_checked(link, n, size))


def hierarchical_all_reduce(inner: Link, outer: Link, m: int, k: int, size: float) -> float:
    """All-reduce of ``size`` units over ``k`` domains of ``m`` ranks each, domain by domain.

    A ring reduce-scatter inside each domain leaves every rank a ``size / m`` shard; the ``m``
    ranks holding the same shard all-reduce it across the ``k`` domains over ``outer``
    (concurrently); a ring all-gather inside rebuilds the result. Cost, with ``n = k * m``:
    ``2 (m - 1) (alpha_i + beta_i S / m) + 2 (k - 1) (alpha_o + beta_o S / n)``.

    It is the flat ring when ``m == 1`` (on ``outer``), or ``k == 1`` and ``inner == outer``.
    Against the flat ring on ``outer`` it saves ``2 (m - 1) ((k alpha_o - alpha_i) +
    (beta_o - beta_i) S / m)``, so it is never slower when the inner link is at least as fast
    in both figures (``alpha_i <= alpha_o``, ``beta_i <= beta_o``); a faster bandwidth alone is
    not enough (an inner latency above ``k`` outer latencies loses on small messages).

    >>> from topology.cost import Link
    >>> fast, slow = Link(latency=0.0, bandwidth=100.0), Link(latency=0.0, bandwidth=10.0)
    >>> round(hierarchical_all_reduce(fast, slow, 4, 2, 800.0), 6)  # 2*3*2 + 2*1*10
    32.0
    >>> round(all_reduce(slow, 8, 800.0), 6)
    140.0
    """
    inner = check_instance("inner", inner, Link, "a Link, e.g. H100_NODE.intra")
    outer = check_instance("outer", outer, Link, "a Link, e.g. H100_NODE.inter")
    return two_level_all_reduce(
        inner, outer, check_count("m", m), check_count("k", k), check_amount("size", size)
    )


def all_gather(link: Link, n: int, size: float) -> float:
    """Ring all-gather whose result is ``size`` units (each rank contributes ``size / n``).

    >>> from topology.cost import TOY_GPU
    >>> round(all_gather(TOY_GPU.intra, 4, 500.0), 6)
    3.9
    """
    return ring_all_gather(*_checked(link, n, size))


def reduce_scatter(link: Link, n: int, size: float) -> float:
    """Ring reduce-scatter of ``size`` units; the same cost as :func:`all_gather`."""
    return all_gather(link, n, size)


def all_to_all(link: Link, n: int, size: float) -> float:
    """Pairwise all-to-all in which each rank sends ``size / n`` units to each of the others.

    >>> from topology.cost import TOY_GPU
    >>> round(all_to_all(TOY_GPU.intra, 2, 100.0), 6)
    0.55
    """
    return all_gather(link, n, size)


def p2p(link: Link, size: float) -> float:
    """One point-to-point send of ``size`` units.

    >>> from topology.cost import TOY_GPU
    >>> round(p2p(TOY_GPU.intra, 10.0), 6)
    0.15
    """
    checked, _, size = _checked(link, 1, size)
    return send(checked, size)


def sequential_ring(link: Link, n: int, size: float, receive: float) -> float:
    """Seed 003's "ring all-reduce": each of ``n`` ranks in turn sends all ``size`` units.

    Every send is followed by a receive acknowledgement of ``receive`` seconds and nothing
    overlaps, so the cost is ``n * (alpha + beta * S + receive)``: linear in ``n`` and paying the
    full message each time, unlike the textbook ring (:func:`all_reduce`).

    >>> from topology.cost import TOY_GPU
    >>> round(sequential_ring(TOY_GPU.intra, 4, 500.0, receive=0.05), 6)
    20.4
    """
    link, n, size = _checked(link, n, size)
    receive = check_amount("receive", receive)
    return n * (send(link, size) + receive) if n > 1 else 0.0
