"""Validation and normalisation of a Topology's fields (private).

Every rule here is one that Megatron-core either checks with a bare assertion, or does not check
and then builds wrong groups for; each raises ``TopologyError`` with the arithmetic and a fix.
"""

from __future__ import annotations

import attrs

from .._args import (
    MAX_WORLD_SIZE,
    check_rank_offset,
    check_size,
    divisors,
    format_choices,
    show,
)
from .._errors import TopologyError
from .._layout.grid import Grid

__all__ = ["MAX_WORLD_SIZE", "ORDER_TOKENS", "Resolved", "validate_topology"]

ORDER_TOKENS = ("tp", "cp", "ep", "dp", "pp")

# Megatron's RankGenerator appends missing (size-1) tokens in this order.
_APPEND_ORDER = ("tp", "pp", "dp", "ep", "cp")


@attrs.frozen
class Resolved:
    """The values a Topology derives from its given fields, and its two grids.

    Equality covers the derived values (a Topology compares on them), not the grids, which
    follow from the fields.
    """

    etp: int
    dp: int
    order: str
    embedding_stages: tuple[int, ...]
    position_embedding_stages: tuple[int, ...]
    dense: Grid = attrs.field(eq=False)
    expert: Grid | None = attrs.field(eq=False)


def validate_topology(
    *,
    world_size: int,
    tp: int,
    pp: int,
    cp: int,
    ep: int,
    etp: int | None,
    dp: int | None,
    vpp: int | None,
    order: str,
    rank_offset: int,
    dist_opt_instances: int,
    hcp_sizes: tuple[int, ...] | None,
    embedding_stages: tuple[int, ...],
    position_embedding_stages: tuple[int, ...],
) -> Resolved:
    """Check the fields as given and return the values derived from them.

    >>> validate_topology(
    ...     world_size=8, tp=2, pp=1, cp=1, ep=1, etp=None, dp=None, vpp=None, order="tp-dp",
    ...     rank_offset=0, dist_opt_instances=1, hcp_sizes=None, embedding_stages=(0, -1),
    ...     position_embedding_stages=(0,),
    ... ).order
    'tp-dp-pp-ep-cp'
    """
    world = world_size
    if type(world) is int and world > MAX_WORLD_SIZE:
        raise TopologyError(
            f"world_size {show(world)} is larger than {MAX_WORLD_SIZE} (2**40), the most ranks "
            "rank-topology lays out; use a smaller world"
        )
    world = check_size("world_size", world)
    tp = check_size("tp", tp)
    pp = check_size("pp", pp)
    cp = check_size("cp", cp)
    ep = check_size("ep", ep)
    given_dp = dp
    etp = tp if etp is None else check_size("etp", etp)
    instances = check_size("dist_opt_instances", dist_opt_instances)
    offset = check_rank_offset(rank_offset)

    model = tp * cp * pp
    if world % model:
        raise TopologyError(
            f"world_size {world} is not divisible by tp({tp}) * cp({cp}) * pp({pp}) = {model}; "
            f"valid world sizes are multiples of {model}"
        )
    dp = world // model
    if given_dp is not None and check_size("dp", given_dp) != dp:
        raise TopologyError(
            f"dp({given_dp}) does not match world_size {world} / (tp({tp}) * cp({cp}) * "
            f"pp({pp})) = {dp}; leave dp out or pass dp={dp}"
        )
    expert_model = etp * ep * pp
    if world % expert_model:
        valid = [d for d in divisors(world) if world % (etp * d * pp) == 0]
        raise TopologyError(
            f"world_size {world} is not divisible by etp({etp}) * ep({ep}) * pp({pp}) = "
            f"{expert_model}; valid ep: {format_choices(valid) or 'none, change etp or pp'}"
        )
    edp = world // expert_model

    if vpp is not None:
        check_size("vpp", vpp)
        if pp == 1:
            raise TopologyError(
                f"vpp({vpp}) needs pipeline stages to interleave, but pp is 1; "
                "drop vpp or use pp > 1"
            )

    hcp = hcp_sizes
    if hcp is not None:
        if not isinstance(hcp, tuple) or not hcp:
            raise TopologyError(f"hcp_sizes must be a non-empty list of ints, got {show(hcp)}")
        product = 1
        for level, size in enumerate(hcp):
            product *= check_size(f"hcp_sizes[{level}]", size)
        if product != cp:
            raise TopologyError(
                f"hcp_sizes {show(list(hcp))} multiply to {product} but cp is {cp}; "
                f"give level sizes whose product is {cp}"
            )

    if (dp * cp) % instances or edp % instances:
        valid = [d for d in divisors(dp * cp) if edp % d == 0]
        raise TopologyError(
            f"dist_opt_instances({instances}) must divide both dp * cp = {dp * cp} and "
            f"edp = {edp}; valid: {format_choices(valid)}"
        )

    sizes = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp}
    expert_sizes = {"tp": etp, "ep": ep, "dp": edp, "pp": pp, "cp": 1}
    tokens = _order_tokens(order, sizes, expert_sizes)
    order = "-".join(tokens)
    dense = Grid.from_order(
        "-".join(t for t in tokens if t != "ep"),
        rank_offset=offset,
        **{t: sizes[t] for t in tokens if t != "ep"},
    )
    moe = ep > 1 or etp != tp
    expert_grid = _expert_grid(tokens, expert_sizes, offset)
    agree = _pipelines_agree(order, tokens, sizes, expert_sizes, dense, expert_grid, moe)
    expert = expert_grid if agree else None

    return Resolved(
        etp=etp,
        dp=dp,
        order=order,
        embedding_stages=_stages("embedding_stages", embedding_stages, pp),
        position_embedding_stages=_stages(
            "position_embedding_stages", position_embedding_stages, pp
        ),
        dense=dense,
        expert=expert,
    )


def _order_tokens(order: object, sizes: dict[str, int], expert_sizes: dict[str, int]) -> list[str]:
    if not isinstance(order, str) or not order:
        raise TopologyError(f"order must be a string like 'tp-cp-ep-dp-pp', got {show(order)}")
    tokens = order.lower().split("-")
    for token in tokens:
        if token not in ORDER_TOKENS:
            raise TopologyError(
                f"order {show(order)} has unknown axis {show(token)}; valid axes: "
                f"{', '.join(ORDER_TOKENS)}"
            )
    for token in tokens:
        if tokens.count(token) > 1:
            raise TopologyError(f"order {show(order)} names {token!r} twice; name each axis once")
    for token in _APPEND_ORDER:
        if token in tokens:
            continue
        size = max(sizes[token], expert_sizes[token])
        if size > 1:
            which = {"dp": "dp (or edp)", "tp": "tp (or etp)"}.get(token, token)
            raise TopologyError(
                f"order {show(order)} leaves out {token!r} but {which} is {size}; add {token!r} "
                f"to the order, e.g. {'-'.join([*tokens, token])!r}"
            )
        tokens.append(token)
    return tokens


def _expert_grid(tokens: list[str], expert_sizes: dict[str, int], offset: int) -> Grid:
    names = {"tp": "etp", "ep": "ep", "dp": "edp", "pp": "pp"}
    return Grid.from_order(
        "-".join(names[t] for t in tokens if t != "cp"),
        rank_offset=offset,
        **{names[t]: expert_sizes[t] for t in tokens if t != "cp"},
    )


def _pipelines_agree(
    order: str,
    tokens: list[str],
    sizes: dict[str, int],
    expert_sizes: dict[str, int],
    dense: Grid,
    expert: Grid,
    moe: bool,
) -> bool:
    """True if both grids put pipeline stages on the same ranks; raise if that matters (MoE)."""
    pp = sizes["pp"]
    if pp == 1:
        return True
    after = tokens[tokens.index("pp") + 1 :]
    pp_outermost = all(sizes[t] == 1 and expert_sizes[t] == 1 for t in after)
    dense_stride = dense.strides[dense.axes.index("pp")]
    expert_stride = expert.strides[expert.axes.index("pp")]
    if not moe:
        return dense_stride == expert_stride
    if not pp_outermost and expert_sizes["dp"] != sizes["dp"]:
        raise TopologyError(
            f"edp({expert_sizes['dp']}) must equal dp({sizes['dp']}) when pp is not the "
            f"outermost axis of order {order!r}; put pp last in the order or make "
            f"etp * ep = tp * cp"
        )
    if dense_stride != expert_stride:
        raise TopologyError(
            f"the dense and expert grids put pipeline stages on different ranks (pp stride "
            f"{dense_stride} vs {expert_stride} in order {order!r}); put pp last in the order"
        )
    return True


def _stages(name: str, stages: object, pp: int) -> tuple[int, ...]:
    if not isinstance(stages, tuple) or not stages:
        raise TopologyError(f"{name} must be a non-empty list of stage indices, got {show(stages)}")
    normalised = set()
    for stage in stages:
        if type(stage) is not int or not -pp <= stage < pp:
            raise TopologyError(
                f"{name} entry {show(stage)} is out of range for pp({pp}); valid stages: "
                f"{-pp} to {pp - 1}"
            )
        normalised.add(stage % pp)
    return tuple(sorted(normalised))
