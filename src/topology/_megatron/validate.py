"""Validation and normalisation of a Topology's fields (private).

Every rule here is one that Megatron-core either checks with a bare assertion, or does not check
and then builds wrong groups for; each raises ``TopologyError`` with the arithmetic and a fix.
"""

from __future__ import annotations

import attrs

from .._args import (
    MAX_WORLD_SIZE,
    check_index,
    check_size,
    divisors,
    format_choices,
    show,
)
from .._errors import TopologyError
from .._layout.grid import Grid

__all__ = ["MAX_WORLD_SIZE", "ORDER_TOKENS", "Resolved", "validate_topology"]

ORDER_TOKENS = ("tp", "cp", "ep", "dp", "pp", "gtp", "egtp")

# Megatron's RankGenerator appends missing (size-1) tokens in this order.
_APPEND_ORDER = ("tp", "pp", "dp", "ep", "cp")

# Megatron's one token for both GTP axes: an order naming it puts gtp and egtp there.
_MEGATRON_GTP = "gtp_remat"

# Where Megatron's `_inject_gtp_remat_axis` puts an axis the order leaves out: right after the
# first anchor the order names (dense gtp after tp; expert egtp after ep, else after tp). The
# order must name tp then: Megatron 0.19 finds 'tp' inside 'gtp_remat' and never appends it.
_GTP_ANCHORS = {"gtp": ("tp",), "egtp": ("ep", "tp")}


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
    gtp: int = 1,
    egtp: int = 1,
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
    gtp = check_size("gtp", gtp)
    egtp = check_size("egtp", egtp)
    given_dp = dp
    etp = tp if etp is None else check_size("etp", etp)
    instances = check_size("dist_opt_instances", dist_opt_instances)
    offset = check_index("rank_offset", rank_offset)
    _check_gtp_instances(gtp, egtp, instances)

    model = tp * cp * pp * gtp
    factors = f"tp({tp}) * cp({cp}) * pp({pp})" + (f" * gtp({gtp})" if gtp > 1 else "")
    if world % model:
        raise TopologyError(
            f"world_size {world} is not divisible by {factors} = {model}; "
            f"valid world sizes are multiples of {model}"
        )
    dp = world // model
    if given_dp is not None and check_size("dp", given_dp) != dp:
        raise TopologyError(
            f"dp({given_dp}) does not match world_size {world} / ({factors}) = {dp}; "
            f"leave dp out or pass dp={dp}"
        )
    expert_model = etp * ep * pp * egtp
    if world % expert_model:
        valid = [d for d in divisors(world) if world % (etp * d * pp * egtp) == 0]
        egtp_factor = f" * egtp({egtp})" if egtp > 1 else ""
        raise TopologyError(
            f"world_size {world} is not divisible by etp({etp}) * ep({ep}) * pp({pp})"
            f"{egtp_factor} = {expert_model}; valid ep: "
            f"{format_choices(valid) or 'none, change etp or pp'}"
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

    sizes = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp, "gtp": gtp, "egtp": 1}
    expert_sizes = {"tp": etp, "ep": ep, "dp": edp, "pp": pp, "cp": 1, "gtp": 1, "egtp": egtp}
    tokens = _order_tokens(order, sizes, expert_sizes)
    order = "-".join(tokens)
    dense_tokens = [t for t in tokens if t not in ("ep", "egtp")]
    dense = Grid.from_order(
        "-".join(dense_tokens), rank_offset=offset, **{t: sizes[t] for t in dense_tokens}
    )
    # GTP layouts follow Megatron's checks strictly: both grids must share the pipeline.
    moe = ep > 1 or etp != tp or gtp > 1 or egtp > 1
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


def _check_gtp_instances(gtp: int, egtp: int, instances: int) -> None:
    """Megatron's rule: GTP needs one distributed-optimizer instance."""
    if (gtp > 1 or egtp > 1) and instances > 1:
        raise TopologyError(
            f"dist_opt_instances({instances}) needs gtp = egtp = 1 (Megatron supports GTP with "
            f"one distributed-optimizer instance), but gtp is {gtp} and egtp is {egtp}; "
            "pass dist_opt_instances=1 or gtp=1 and egtp=1"
        )


def _order_tokens(order: object, sizes: dict[str, int], expert_sizes: dict[str, int]) -> list[str]:
    """The order's tokens: checked, gtp / egtp injected (or dropped at size 1), missing axes
    appended."""
    if not isinstance(order, str) or not order:
        raise TopologyError(f"order must be a string like 'tp-cp-ep-dp-pp', got {show(order)}")
    tokens = order.lower().split("-")
    if _MEGATRON_GTP in tokens:
        at = tokens.index(_MEGATRON_GTP)
        tokens[at : at + 1] = ["gtp", "egtp"]
    for token in tokens:
        if token not in ORDER_TOKENS:
            raise TopologyError(
                f"order {show(order)} has unknown axis {show(token)}; valid axes: "
                f"{', '.join(ORDER_TOKENS)}"
            )
    for token in tokens:
        if tokens.count(token) > 1:
            raise TopologyError(f"order {show(order)} names {token!r} twice; name each axis once")
    missing = []
    for token in _APPEND_ORDER:
        if token in tokens:
            continue
        size = max(sizes[token], expert_sizes[token])
        if token == "tp" and max(sizes["gtp"], expert_sizes["egtp"]) > 1:
            gtp = sizes["gtp"] if sizes["gtp"] > 1 else expert_sizes["egtp"]
            which = "gtp" if sizes["gtp"] > 1 else "egtp"
            raise TopologyError(
                f"order {show(order)} leaves out 'tp' but {which} is {gtp} and Megatron places "
                f"the GTP axes by 'tp'; add 'tp' to the order, e.g. {'-'.join(['tp', *tokens])!r}"
            )
        if size > 1:
            which = {"dp": "dp (or edp)", "tp": "tp (or etp)"}.get(token, token)
            raise TopologyError(
                f"order {show(order)} leaves out {token!r} but {which} is {size}; add {token!r} "
                f"to the order, e.g. {'-'.join([*tokens, token])!r}"
            )
        missing.append(token)
    placed = _place_gtp(tokens, {"gtp": sizes["gtp"], "egtp": expert_sizes["egtp"]})
    return [*placed, *missing]


def _place_gtp(given: list[str], gtp_sizes: dict[str, int]) -> list[str]:
    """The given order with gtp and egtp where Megatron's ``_inject_gtp_remat_axis`` puts them
    (named: where named; left out: after the first of :data:`_GTP_ANCHORS` the order names),
    and without them at size 1 (no such axis).

    >>> "-".join(_place_gtp(["tp", "cp", "ep", "dp", "pp"], {"gtp": 2, "egtp": 2}))
    'tp-gtp-cp-ep-egtp-dp-pp'
    >>> "-".join(_place_gtp(["dp", "tp", "gtp"], {"gtp": 1, "egtp": 4}))
    'dp-tp-egtp'
    """
    tokens = list(given)
    for axis, anchors in _GTP_ANCHORS.items():
        if axis not in tokens and gtp_sizes[axis] > 1:
            anchor = next(a for a in anchors if a in given)  # 'tp' is there (checked)
            tokens.insert(tokens.index(anchor) + 1, axis)
    return [t for t in tokens if t not in gtp_sizes or gtp_sizes[t] > 1]


def _expert_grid(tokens: list[str], expert_sizes: dict[str, int], offset: int) -> Grid:
    names = {"tp": "etp", "ep": "ep", "dp": "edp", "pp": "pp", "egtp": "egtp"}
    kept = [t for t in tokens if t in names]
    return Grid.from_order(
        "-".join(names[t] for t in kept),
        rank_offset=offset,
        **{names[t]: expert_sizes[t] for t in kept},
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
    # Megatron reads "pp last" off the order string; size-1 axes after pp change no group.
    pp_outermost = all(sizes[t] == 1 and expert_sizes[t] == 1 for t in after)
    dense_stride = dense.strides[dense.axes.index("pp")]
    expert_stride = expert.strides[expert.axes.index("pp")]
    if not moe:
        return dense_stride == expert_stride
    if not pp_outermost and expert_sizes["dp"] != sizes["dp"]:
        raise TopologyError(
            f"edp({expert_sizes['dp']}) must equal dp({sizes['dp']}) when pp is not the "
            f"outermost axis of order {order!r}; put pp last in the order or make "
            f"{_product('etp', 'ep', 'egtp', sizes=expert_sizes)} = "
            f"{_product('tp', 'cp', 'gtp', sizes=sizes)}"
        )
    if dense_stride != expert_stride:
        raise TopologyError(
            f"the dense and expert grids put pipeline stages on different ranks (pp stride "
            f"{dense_stride} vs {expert_stride} in order {order!r}); put pp last in the order"
        )
    return True


def _product(*names: str, sizes: dict[str, int]) -> str:
    """``etp * ep``, with the GTP factor when it is larger than 1 (``etp * ep * egtp``)."""
    return " * ".join(n for n in names if not n.endswith("gtp") or sizes[n] > 1)


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
