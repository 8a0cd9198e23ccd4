"""Run Megatron-core itself on our groups: :func:`install` and :func:`uninstall`.

After ``install()``, ``megatron.core.parallel_state.initialize_model_parallel(...)`` (as
Megatron's own training setup calls it) creates its groups through our façade
(``topology_torch.compat.megatron``, strategy ``"auto"``: the fastest the default group allows,
``split`` on an NCCL group bound to a device, else each rank makes only the distinct groups it
belongs to) and writes them into Megatron's module globals. It follows the installed
megatron-core (0.16.1 to 0.19.2 are tested): the globals it fills are exactly those the
installed ``initialize_model_parallel`` assigns (read from its code, not assumed per version),
and it takes that version's arguments. Every Megatron getter
reads those globals, so ``parallel_state.get_*``, the getters other Megatron modules imported by
name (``from megatron.core.parallel_state import get_tensor_model_parallel_rank`` in nine modules
of 0.16.1), and the code that reads a global directly all answer with our groups, until
``destroy_model_parallel()``. Nothing else of Megatron is replaced: only its
``initialize_model_parallel`` and ``destroy_model_parallel``, in ``parallel_state`` and in every
loaded module that bound them by name (``megatron.training.training`` binds the latter).
``uninstall()`` puts those function objects back everywhere.

SPMD contract: call ``install()`` on every rank before Megatron's ``initialize_model_parallel``;
that call and ``destroy_model_parallel()`` keep Megatron's contract (every rank, equal arguments,
same order).

>>> import torch.distributed as dist  # doctest: +SKIP
>>> from megatron.core import parallel_state  # doctest: +SKIP
>>> from topology_torch.compat import megatron  # doctest: +SKIP
>>> dist.init_process_group("gloo")  # doctest: +SKIP
>>> megatron.install()  # doctest: +SKIP
>>> parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)  # doctest: +SKIP
>>> parallel_state.get_tensor_model_parallel_group()  # one of ours  # doctest: +SKIP
"""

from __future__ import annotations

import dis
import importlib
import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch.distributed as dist

from topology import TopologyError

from ... import _default
from .._errors import FacadeAssertionError, topology_of
from . import _hybrid, _initialize, _state

__all__ = [
    "assigned_globals",
    "filled_globals",
    "install",
    "is_installed",
    "published_value",
    "uninstall",
]

_MODULE = "megatron.core.parallel_state"
_PATCHED = ("initialize_model_parallel", "destroy_model_parallel")

# Megatron's dicts of hybrid dp-cp groups by size (0.16 to 0.19; the dev branch's name): install()
# fills the one the installed Megatron has, Megatron's getter reads it.
_HYBRID = ("_HYBRID_DP_CP_GROUPS", "_DYNAMIC_DP_CP_GROUPS")

_originals: dict[str, Any] | None = None  # Megatron's functions while installed
_filled: tuple[str, ...] = ()  # the globals the installed initialize_model_parallel assigns
_live = False  # our groups are in Megatron's globals
_hybrid_groups = "lazy"  # when hybrid groups are made (install's argument)


def is_installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _originals is not None


def install(*, hybrid_groups: str = "lazy") -> None:
    """Make ``megatron.core.parallel_state.initialize_model_parallel`` build our groups.

    Idempotent. Call it before Megatron's ``initialize_model_parallel`` (any time after
    importing Megatron is fine: modules imported later bind the installed functions).
    ``hybrid_groups`` says when ``hybrid_context_parallel=True``'s groups are made: ``"lazy"``
    on a size's first get (members-only groups; ``split`` makes them at once), ``"eager"`` in
    ``initialize_model_parallel``.

    Raises:
        TopologyError: megatron-core is not installed, or its ``initialize_model_parallel``
            assigns a global this façade does not know how to fill (a newer megatron-core), or
            ``hybrid_groups`` is neither ``"lazy"`` nor ``"eager"``.
    """
    global _originals, _filled, _hybrid_groups
    if hybrid_groups not in _hybrid.HYBRID_GROUPS:
        raise TopologyError(
            f"hybrid_groups must be 'lazy' or 'eager', got {hybrid_groups!r}; 'lazy' makes each "
            "hybrid group on its first get, 'eager' in initialize_model_parallel"
        )
    _hybrid_groups = hybrid_groups
    if _originals is not None:
        return
    state = _parallel_state()
    missing = [name for name in _PATCHED if not callable(getattr(state, name, None))]
    if missing:
        raise TopologyError(
            f"{_MODULE} of megatron-core {_version()} lacks {', '.join(missing)}; install() "
            "supports megatron-core 0.16.1 to 0.19.2"
        )
    filled = assigned_globals(state.initialize_model_parallel)
    unknown = sorted(set(filled) - set(_VALUES))
    if unknown:
        raise TopologyError(
            f"megatron-core {_version()}'s initialize_model_parallel sets "
            f"{', '.join(unknown)}, which install() does not know how to fill; install() "
            "supports megatron-core 0.16.1 to 0.19.2 (pip install --no-deps "
            "megatron-core==0.19.2), or call Megatron's own initialize_model_parallel"
        )
    originals = {name: getattr(state, name) for name in _PATCHED}
    replacements = {
        "initialize_model_parallel": _wrap_initialize(state, originals),
        "destroy_model_parallel": _wrap_destroy(state, originals),
    }
    _rebind(originals, replacements)
    _filled = filled
    _state.destroy_hooks.append(_forget)
    _hybrid.made_hooks.append(_register)
    _originals = originals


def uninstall() -> None:
    """Put Megatron's own ``initialize_model_parallel`` and ``destroy_model_parallel`` back.

    Every module that holds the installed functions gets Megatron's function objects again.
    A no-op when not installed (also without megatron-core).

    Raises:
        FacadeAssertionError: our groups are still in Megatron's globals; call
            ``megatron.core.parallel_state.destroy_model_parallel()`` on every rank first.
    """
    global _originals
    if _originals is None:
        return
    if _live:
        raise FacadeAssertionError(
            "uninstall() found the groups of the installed initialize_model_parallel() still "
            f"alive; call {_MODULE}.destroy_model_parallel() on every rank first"
        )
    state = sys.modules[_MODULE]
    installed = {name: getattr(state, name) for name in _PATCHED}
    _rebind(installed, _originals)
    _state.destroy_hooks.remove(_forget)
    _hybrid.made_hooks.remove(_register)
    _originals = None


def assigned_globals(function: Callable[..., Any]) -> tuple[str, ...]:
    """The module globals ``function``'s own code assigns (``global X; X = ...``), sorted.

    This is how :func:`install` learns what the installed ``initialize_model_parallel`` fills:
    38 globals in megatron-core 0.16.1 and 0.17.1, 37 in 0.18.2 (no
    ``_DATA_PARALLEL_GROUP_WITH_CP_AG``), 47 in 0.19.2 (the GTP globals).

    >>> counter = 0
    >>> def bump() -> None:
    ...     global counter
    ...     counter += 1
    >>> assigned_globals(bump)
    ('counter',)
    """
    code = inspect.unwrap(function).__code__
    stores = {i.argval for i in dis.get_instructions(code) if i.opname == "STORE_GLOBAL"}
    return tuple(sorted(stores))


def published_value(name: str, groups: Any) -> Any:
    """What install() writes into Megatron's global ``name`` for ``groups`` (this rank)."""
    return _VALUES[name](groups)


def filled_globals() -> tuple[str, ...]:
    """The globals the installed ``initialize_model_parallel`` fills (empty when not installed)."""
    return _filled if _originals is not None else ()


# -- internals ----------------------------------------------------------------------------------


def _version() -> str:
    """The installed megatron-core's version (``package_info``), or ``'unknown'``."""
    try:
        info = importlib.import_module("megatron.core.package_info")
    except Exception:  # an unpacked or vendored megatron-core may lack it
        return "unknown"
    return str(getattr(info, "__version__", "unknown"))


def _parallel_state() -> ModuleType:
    try:
        state = importlib.import_module(_MODULE)
    except ImportError as error:
        raise TopologyError(
            f"install() needs megatron-core ({_MODULE} could not be imported: {error}); "
            "install it with pip install --no-deps megatron-core"
        ) from error
    if getattr(state, "__name__", None) != _MODULE:
        raise TopologyError(
            f"{_MODULE} is aliased to {getattr(state, '__name__', state)!r}, not Megatron's "
            "module; install() patches Megatron's own parallel_state (remove the alias)"
        )
    return state


def _rebind(old: dict[str, Any], new: dict[str, Any]) -> None:
    """In every loaded module, replace each binding of ``old[name]`` by ``new[name]``."""
    for module in list(sys.modules.values()):
        if not isinstance(module, ModuleType):
            continue
        namespace = module.__dict__
        for name, function in old.items():
            if namespace.get(name) is function:
                namespace[name] = new[name]


def _wrap_initialize(state: ModuleType, originals: dict[str, Any]) -> Callable[..., None]:
    signature = inspect.signature(originals["initialize_model_parallel"])

    def initialize_model_parallel(*args: Any, **kwargs: Any) -> None:
        global _live
        arguments = signature.bind(*args, **kwargs)
        arguments.apply_defaults()
        passed = _facade_arguments(arguments)
        if state._DATA_PARALLEL_GROUP is not None and not _live:
            # Megatron's own groups: its checks of the arguments come first, as in Megatron
            if dist.is_available() and dist.is_initialized():
                ours = ("strategy", "hybrid_groups")
                _initialize.plan(**{k: v for k, v in passed.items() if k not in ours})
            raise FacadeAssertionError(
                f"{_MODULE} is already initialized; call destroy_model_parallel() on every "
                "rank first"
            )
        _initialize.initialize_model_parallel(**passed)
        try:
            for name, value in _published().items():
                setattr(state, name, value)
            for name in _HYBRID:
                if hasattr(state, name):
                    made = _hybrid.current()
                    setattr(state, name, made if made is not None else {})
            if state._GLOBAL_MEMORY_BUFFER is None:
                state._set_global_memory_buffer()
        except BaseException:
            _clear(state)
            _initialize.destroy_model_parallel()
            raise
        _live = True

    initialize_model_parallel.__doc__ = (
        "Megatron's initialize_model_parallel, building topology_torch's groups "
        "(installed by topology_torch.compat.megatron.install())."
    )
    initialize_model_parallel.__wrapped__ = originals["initialize_model_parallel"]  # type: ignore[attr-defined]
    initialize_model_parallel.__signature__ = signature  # type: ignore[attr-defined]
    return initialize_model_parallel


def _wrap_destroy(state: ModuleType, originals: dict[str, Any]) -> Callable[[], None]:
    original = originals["destroy_model_parallel"]

    def destroy_model_parallel() -> None:
        if _live:
            _clear(state)  # first: Megatron's destroy then leaves our gloo groups alone
            if _default.held_by(_state.OWNER) is not None:
                _initialize.destroy_model_parallel()
        original()

    destroy_model_parallel.__doc__ = (
        "Megatron's destroy_model_parallel, also releasing topology_torch's groups "
        "(installed by topology_torch.compat.megatron.install())."
    )
    destroy_model_parallel.__wrapped__ = original  # type: ignore[attr-defined]
    return destroy_model_parallel


def _forget() -> None:
    """The façade's own ``destroy_model_parallel`` ran: Megatron's globals forget our groups."""
    if _live and _MODULE in sys.modules:
        _clear(sys.modules[_MODULE])


def _register(group: Any) -> None:
    """A hybrid group made after initialize (on first get) joins Megatron's list of this rank's
    groups, as its ``create_group`` adds each group it makes (``update_pg_timeout`` reads it);
    those made in initialize are listed by :func:`_published`."""
    listed = getattr(sys.modules.get(_MODULE), "_global_process_group_list", None)
    if _live and isinstance(listed, list) and all(g is not group for g in listed):
        listed.append(group)


def _facade_arguments(arguments: inspect.BoundArguments) -> dict[str, Any]:
    """Megatron's bound arguments as keywords of the façade's ``initialize_model_parallel``.

    Raises:
        FacadeAssertionError: an argument our groups cannot honour (or the façade does not
            take) set to anything but Megatron's default.
    """
    accepted = inspect.signature(_initialize.initialize_model_parallel).parameters
    defaults = arguments.signature.parameters
    # the fastest strategy the default group allows; install()'s hybrid_groups
    passed: dict[str, Any] = {"strategy": "auto", "hybrid_groups": _hybrid_groups}
    for name, value in arguments.arguments.items():
        if name in accepted:
            passed[name] = value
        elif value != defaults[name].default:
            raise FacadeAssertionError(
                f"initialize_model_parallel({name}={value!r}) is not supported on "
                "topology_torch's groups; leave it at Megatron's default, or call "
                "topology_torch.compat.megatron.uninstall() to use Megatron's own groups"
            )
    return passed


def _published() -> dict[str, Any]:
    """The value of each global the installed Megatron fills, for this rank, from our groups."""
    groups = _default.owned(_state.OWNER)
    values = {name: _VALUES[name](groups) for name in _filled}
    held = [g for name, g in values.items() if name.endswith(("_GROUP", "_GLOO", "_AG", "_EGTP"))]
    held += values.get("_HIERARCHICAL_CONTEXT_PARALLEL_GROUPS") or []
    held += list((_hybrid.current() or {}).values())  # those made already (eager, split)
    distinct = {id(g): g for g in held if g is not None and g is not dist.group.WORLD}
    # Megatron's list of the groups this rank holds (None is the default group), for
    # update_pg_timeout()
    values["_global_process_group_list"] = [None, *distinct.values()]
    return values


def _clear(state: ModuleType) -> None:
    """Empty every global :func:`_published` filled (Megatron's destroy forgets some)."""
    global _live
    for name in _filled:
        setattr(state, name, None)
    for name in _HYBRID:  # Megatron's destroy keeps its dict; ours are destroyed: an empty one
        if hasattr(state, name):
            setattr(state, name, {})
    state._global_process_group_list = None  # type: ignore[attr-defined]
    _live = False


# -- what each of Megatron's globals holds, from our groups ---------------------------------------

Value = Callable[[Any], Any]


def _member(groups: Any, kind: str) -> bool:
    return kind in groups.kinds and groups.has_group(kind)


def _group(kind: str) -> Value:
    return lambda groups: groups.group(kind) if _member(groups, kind) else None


def _ranks(kind: str) -> Value:
    return lambda groups: list(groups.ranks(kind)) if _member(groups, kind) else None


def _gloo(kind: str) -> Value:
    def value(groups: Any) -> Any:
        try:
            return groups.gloo_group(kind) if _member(groups, kind) else None
        except TopologyError:  # not created (create_gloo_process_groups=False, or GTP)
            return None

    return value


def _partial(kind: str, whole: str, value: Callable[[str], Value]) -> Value:
    """``kind`` with several distributed-optimizer instances, else ``whole`` (Megatron's alias)."""
    return lambda groups: value(kind if topology_of(groups).dist_opt_instances > 1 else whole)(
        groups
    )


def _wide(kind: str, plain: Value) -> Value:
    """0.19's ``*_WITH_GTP_REMAT``: the GTP-widened ``kind`` where it exists, else ``plain``."""
    return lambda groups: _group(kind)(groups) if kind in groups.kinds else plain(groups)


def _alone_or(kind: str) -> Value:
    """A GTP group: ``kind``'s where gtp > 1, else this rank alone (Megatron's singleton)."""
    return lambda groups: groups.group(kind) if kind in groups.kinds else _state.singleton()


def _alone_ranks(kind: str) -> Value:
    return lambda groups: list(groups.ranks(kind)) if kind in groups.kinds else [groups.global_rank]


def _all_gather(groups: Any) -> Any:
    return groups.independent_group("dp-cp") if groups.has_independent("dp-cp") else None


def _intra_instance(groups: Any) -> Any:
    # one optimizer instance spans the whole world: Megatron's group is the default group
    if topology_of(groups).dist_opt_instances > 1:
        return _group("intra-dist-opt")(groups)
    return dist.group.WORLD


def _levels(groups: Any) -> Any:
    levels = [groups.group(kind) for kind in groups.kinds if kind.startswith("hcp-")]
    return levels or None


_INTRA_DP = _partial("intra-dp-cp", "dp-cp", _group)
_INTRA_EDP = _partial("intra-edp", "edp", _group)

# Every global of parallel_state that some megatron-core's initialize_model_parallel assigns.
_VALUES: dict[str, Value] = {
    "_TENSOR_MODEL_PARALLEL_GROUP": _group("tp"),
    "_TENSOR_MODEL_PARALLEL_GLOBAL_RANKS": _ranks("tp"),
    "_PIPELINE_MODEL_PARALLEL_GROUP": _group("pp"),
    "_PIPELINE_GLOBAL_RANKS": _ranks("pp"),
    "_MODEL_PARALLEL_GROUP": _group("tp-pp"),
    "_MODEL_PARALLEL_GLOBAL_RANKS": _ranks("tp-pp"),
    "_EMBEDDING_GROUP": _group("embedding"),
    "_EMBEDDING_GLOBAL_RANKS": _ranks("embedding"),
    "_POSITION_EMBEDDING_GROUP": _group("position-embedding"),
    "_POSITION_EMBEDDING_GLOBAL_RANKS": _ranks("position-embedding"),
    "_DATA_PARALLEL_GROUP": _group("dp"),
    "_DATA_PARALLEL_GROUP_GLOO": _gloo("dp"),
    "_DATA_PARALLEL_GLOBAL_RANKS": _ranks("dp"),
    "_DATA_PARALLEL_GROUP_WITH_CP": _group("dp-cp"),
    "_DATA_PARALLEL_GROUP_WITH_CP_AG": _all_gather,  # 0.16, 0.17
    "_DATA_PARALLEL_GROUP_WITH_CP_GLOO": _gloo("dp-cp"),
    "_DATA_PARALLEL_GLOBAL_RANKS_WITH_CP": _ranks("dp-cp"),
    "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP": _INTRA_DP,
    "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_GLOO": _partial("intra-dp-cp", "dp-cp", _gloo),
    "_CONTEXT_PARALLEL_GROUP": _group("cp"),
    "_CONTEXT_PARALLEL_GLOBAL_RANKS": _ranks("cp"),
    "_HIERARCHICAL_CONTEXT_PARALLEL_GROUPS": _levels,
    "_TENSOR_AND_DATA_PARALLEL_GROUP": _group("tp-dp"),
    "_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": _group("tp-dp-cp"),
    "_TENSOR_AND_CONTEXT_PARALLEL_GROUP": _group("tp-cp"),
    "_EXPERT_MODEL_PARALLEL_GROUP": _group("ep"),
    "_EXPERT_MODEL_PARALLEL_RANKS": _ranks("ep"),
    "_EXPERT_TENSOR_PARALLEL_GROUP": _group("etp"),
    "_EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": _group("etp-ep"),
    "_EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": _group("etp-ep-pp"),
    "_EXPERT_DATA_PARALLEL_GROUP": _group("edp"),
    "_EXPERT_DATA_PARALLEL_GROUP_GLOO": _gloo("edp"),
    "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP": _INTRA_EDP,
    "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP_GLOO": _partial("intra-edp", "edp", _gloo),
    "_INTER_PARTIAL_EXPERT_DATA_PARALLEL_GROUP": lambda groups: (
        _group("inter-edp")(groups) if topology_of(groups).dist_opt_instances > 1 else None
    ),
    "_INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": _intra_instance,
    "_VIRTUAL_PIPELINE_MODEL_PARALLEL_RANK": lambda groups: (
        None if topology_of(groups).vpp is None else 0
    ),
    "_VIRTUAL_PIPELINE_MODEL_PARALLEL_WORLD_SIZE": lambda groups: topology_of(groups).vpp,
    # 0.19: generalized tensor parallelism (GTP), dense and expert
    "_GTP_WEIGHT_REMAT_GROUP": _alone_or("gtp"),
    "_GTP_WEIGHT_REMAT_GLOBAL_RANKS": _alone_ranks("gtp"),
    "_EXPERT_GTP_WEIGHT_REMAT_GROUP": _alone_or("egtp"),
    "_EXPERT_GTP_WEIGHT_REMAT_GLOBAL_RANKS": _alone_ranks("egtp"),
    "_DATA_PARALLEL_GROUP_WITH_GTP_REMAT": _wide("gtp-dp", _group("dp")),
    "_DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT": _wide("gtp-dp-cp", _group("dp-cp")),
    "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT": _wide("gtp-dp-cp", _INTRA_DP),
    "_EXPERT_DATA_PARALLEL_GROUP_WITH_GTP_REMAT": _wide("egtp-edp", _group("edp")),
    "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP_WITH_GTP_REMAT": _wide("egtp-edp", _INTRA_EDP),
    "_EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP": _wide(
        "etp-ep-egtp-pp", _group("etp-ep-pp")
    ),
}
