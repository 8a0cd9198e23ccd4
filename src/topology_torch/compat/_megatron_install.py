"""Run Megatron-core itself on our groups: :func:`install` and :func:`uninstall`.

After ``install()``, ``megatron.core.parallel_state.initialize_model_parallel(...)`` (as
Megatron's own training setup calls it) creates its groups through our façade
(``topology_torch.compat.megatron``, strategy ``"local"``: each rank makes only the distinct
groups it belongs to) and writes them into Megatron's module globals. Every Megatron getter
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

import importlib
import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch.distributed as dist

from topology import TopologyError

from .. import _default
from ._errors import FacadeAssertionError, topology_of

__all__ = ["install", "is_installed", "uninstall"]

_MODULE = "megatron.core.parallel_state"
_PATCHED = ("initialize_model_parallel", "destroy_model_parallel")

# Megatron's arguments whose non-default values our groups cannot honour. The façade refuses them
# too; refusing here names the way back to Megatron's own groups.
_REFUSED = ("hybrid_context_parallel",)

# Every module global of parallel_state that Megatron's initialize_model_parallel sets (0.16.1).
# A value-holding global is listed once; _published computes each one's value.
_GLOBALS = (
    "_TENSOR_MODEL_PARALLEL_GROUP",
    "_TENSOR_MODEL_PARALLEL_GLOBAL_RANKS",
    "_PIPELINE_MODEL_PARALLEL_GROUP",
    "_PIPELINE_GLOBAL_RANKS",
    "_MODEL_PARALLEL_GROUP",
    "_MODEL_PARALLEL_GLOBAL_RANKS",
    "_EMBEDDING_GROUP",
    "_EMBEDDING_GLOBAL_RANKS",
    "_POSITION_EMBEDDING_GROUP",
    "_POSITION_EMBEDDING_GLOBAL_RANKS",
    "_DATA_PARALLEL_GROUP",
    "_DATA_PARALLEL_GROUP_GLOO",
    "_DATA_PARALLEL_GLOBAL_RANKS",
    "_DATA_PARALLEL_GROUP_WITH_CP",
    "_DATA_PARALLEL_GROUP_WITH_CP_AG",
    "_DATA_PARALLEL_GROUP_WITH_CP_GLOO",
    "_DATA_PARALLEL_GLOBAL_RANKS_WITH_CP",
    "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP",
    "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_GLOO",
    "_CONTEXT_PARALLEL_GROUP",
    "_CONTEXT_PARALLEL_GLOBAL_RANKS",
    "_HIERARCHICAL_CONTEXT_PARALLEL_GROUPS",
    "_TENSOR_AND_DATA_PARALLEL_GROUP",
    "_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP",
    "_TENSOR_AND_CONTEXT_PARALLEL_GROUP",
    "_EXPERT_MODEL_PARALLEL_GROUP",
    "_EXPERT_MODEL_PARALLEL_RANKS",
    "_EXPERT_TENSOR_PARALLEL_GROUP",
    "_EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP",
    "_EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP",
    "_EXPERT_DATA_PARALLEL_GROUP",
    "_EXPERT_DATA_PARALLEL_GROUP_GLOO",
    "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP",
    "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP_GLOO",
    "_INTER_PARTIAL_EXPERT_DATA_PARALLEL_GROUP",
    "_INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP",
    "_VIRTUAL_PIPELINE_MODEL_PARALLEL_RANK",
    "_VIRTUAL_PIPELINE_MODEL_PARALLEL_WORLD_SIZE",
)

_originals: dict[str, Any] | None = None  # Megatron's functions while installed
_facade: ModuleType | None = None  # topology_torch.compat.megatron, given by its install()
_live = False  # our groups are in Megatron's globals


def is_installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _originals is not None


def install(facade: ModuleType) -> None:
    """Make ``megatron.core.parallel_state.initialize_model_parallel`` build our groups.

    ``facade`` is :mod:`topology_torch.compat.megatron` (its ``install()`` passes itself, so
    this module does not import it back).

    Idempotent. Call it before Megatron's ``initialize_model_parallel`` (any time after
    importing Megatron is fine: modules imported later bind the installed functions).

    Raises:
        TopologyError: megatron-core is not installed, or its ``parallel_state`` is not the
            one this was written for (0.16: a global we fill is missing).
    """
    global _originals, _facade
    if _originals is not None:
        return
    _facade = facade
    state = _parallel_state()
    missing = [name for name in (*_GLOBALS, *_PATCHED) if not hasattr(state, name)]
    if missing:
        raise TopologyError(
            f"{_MODULE} lacks {', '.join(missing)}; install() supports megatron-core 0.16 "
            "(pip install --no-deps megatron-core==0.16.1)"
        )
    originals = {name: getattr(state, name) for name in _PATCHED}
    replacements = {
        "initialize_model_parallel": _wrap_initialize(state, originals),
        "destroy_model_parallel": _wrap_destroy(state, originals),
    }
    _rebind(originals, replacements)
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
    _originals = None


# -- internals ----------------------------------------------------------------------------------


def _the_facade() -> ModuleType:
    """The façade module :func:`install` was given."""
    if _facade is None:  # pragma: no cover - every caller runs after install()
        raise TopologyError("topology_torch.compat.megatron.install() has not run")
    return _facade


def _parallel_state() -> ModuleType:
    try:
        state = importlib.import_module(_MODULE)
    except ImportError as error:
        raise TopologyError(
            f"install() needs megatron-core ({_MODULE} could not be imported: {error}); "
            "install it with pip install --no-deps megatron-core==0.16.1"
        ) from error
    if state is _the_facade() or getattr(state, "__name__", None) != _MODULE:
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
        if _live and _default.held_by(_the_facade().OWNER) is None:
            _clear(state)  # the façade's own destroy_model_parallel() released our groups
        if state._DATA_PARALLEL_GROUP is not None:
            raise FacadeAssertionError(
                f"{_MODULE} is already initialized; call destroy_model_parallel() on every "
                "rank first"
            )
        _the_facade().initialize_model_parallel(**_facade_arguments(arguments))
        try:
            for name, value in _published(state).items():
                setattr(state, name, value)
            if state._GLOBAL_MEMORY_BUFFER is None:
                state._set_global_memory_buffer()
        except BaseException:
            _clear(state)
            _the_facade().destroy_model_parallel()
            raise
        _live = True

    initialize_model_parallel.__doc__ = (
        "Megatron's initialize_model_parallel, building topology_torch's groups "
        "(installed by topology_torch.compat.megatron.install())."
    )
    initialize_model_parallel.__wrapped__ = originals["initialize_model_parallel"]  # type: ignore[attr-defined]
    return initialize_model_parallel


def _wrap_destroy(state: ModuleType, originals: dict[str, Any]) -> Callable[[], None]:
    original = originals["destroy_model_parallel"]

    def destroy_model_parallel() -> None:
        global _live
        if _live:
            _clear(state)  # first: Megatron's destroy then leaves our gloo groups alone
            _live = False
            if _default.held_by(_the_facade().OWNER) is not None:
                _the_facade().destroy_model_parallel()
        original()

    destroy_model_parallel.__doc__ = (
        "Megatron's destroy_model_parallel, also releasing topology_torch's groups "
        "(installed by topology_torch.compat.megatron.install())."
    )
    destroy_model_parallel.__wrapped__ = original  # type: ignore[attr-defined]
    return destroy_model_parallel


def _facade_arguments(arguments: inspect.BoundArguments) -> dict[str, Any]:
    """Megatron's bound arguments as keywords of the façade's ``initialize_model_parallel``.

    Raises:
        FacadeAssertionError: an argument our groups cannot honour (or the façade does not
            take) set to anything but Megatron's default.
    """
    accepted = inspect.signature(_the_facade().initialize_model_parallel).parameters
    defaults = arguments.signature.parameters
    passed: dict[str, Any] = {"strategy": "local"}
    for name, value in arguments.arguments.items():
        if name in accepted and name not in _REFUSED:
            passed[name] = value
        elif value != defaults[name].default:
            raise FacadeAssertionError(
                f"initialize_model_parallel({name}={value!r}) is not supported on "
                "topology_torch's groups; leave it at Megatron's default, or call "
                "topology_torch.compat.megatron.uninstall() to use Megatron's own groups"
            )
    return passed


def _published(state: ModuleType) -> dict[str, Any]:
    """The value of each of Megatron's globals for this rank, from our groups."""
    groups = _default.owned(_the_facade().OWNER)
    topology = topology_of(groups)
    partial = topology.dist_opt_instances > 1

    def member(kind: str) -> bool:
        return kind in groups.kinds and groups.has_group(kind)

    def group(kind: str) -> Any:
        return groups.group(kind) if member(kind) else None

    def ranks(kind: str) -> list[int] | None:
        return list(groups.ranks(kind)) if member(kind) else None

    def gloo(kind: str) -> Any:
        try:
            return groups.gloo_group(kind)
        except TopologyError:  # not created (create_gloo_process_groups=False)
            return None

    levels = [group(kind) for kind in groups.kinds if kind.startswith("hcp-")]
    intra_dp = "intra-dp-cp" if partial else "dp-cp"
    intra_edp = "intra-edp" if partial else "edp"
    values = {
        "_TENSOR_MODEL_PARALLEL_GROUP": group("tp"),
        "_TENSOR_MODEL_PARALLEL_GLOBAL_RANKS": ranks("tp"),
        "_PIPELINE_MODEL_PARALLEL_GROUP": group("pp"),
        "_PIPELINE_GLOBAL_RANKS": ranks("pp"),
        "_MODEL_PARALLEL_GROUP": group("tp-pp"),
        "_MODEL_PARALLEL_GLOBAL_RANKS": ranks("tp-pp"),
        "_EMBEDDING_GROUP": group("embedding"),
        "_EMBEDDING_GLOBAL_RANKS": ranks("embedding"),
        "_POSITION_EMBEDDING_GROUP": group("position-embedding"),
        "_POSITION_EMBEDDING_GLOBAL_RANKS": ranks("position-embedding"),
        "_DATA_PARALLEL_GROUP": group("dp"),
        "_DATA_PARALLEL_GROUP_GLOO": gloo("dp"),
        "_DATA_PARALLEL_GLOBAL_RANKS": ranks("dp"),
        "_DATA_PARALLEL_GROUP_WITH_CP": group("dp-cp"),
        "_DATA_PARALLEL_GROUP_WITH_CP_AG": _all_gather_group(),
        "_DATA_PARALLEL_GROUP_WITH_CP_GLOO": gloo("dp-cp"),
        "_DATA_PARALLEL_GLOBAL_RANKS_WITH_CP": ranks("dp-cp"),
        "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP": group(intra_dp),
        "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_GLOO": gloo(intra_dp),
        "_CONTEXT_PARALLEL_GROUP": group("cp"),
        "_CONTEXT_PARALLEL_GLOBAL_RANKS": ranks("cp"),
        "_HIERARCHICAL_CONTEXT_PARALLEL_GROUPS": levels or None,
        "_TENSOR_AND_DATA_PARALLEL_GROUP": group("tp-dp"),
        "_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": group("tp-dp-cp"),
        "_TENSOR_AND_CONTEXT_PARALLEL_GROUP": group("tp-cp"),
        "_EXPERT_MODEL_PARALLEL_GROUP": group("ep"),
        "_EXPERT_MODEL_PARALLEL_RANKS": ranks("ep"),
        "_EXPERT_TENSOR_PARALLEL_GROUP": group("etp"),
        "_EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": group("etp-ep"),
        "_EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": group("etp-ep-pp"),
        "_EXPERT_DATA_PARALLEL_GROUP": group("edp"),
        "_EXPERT_DATA_PARALLEL_GROUP_GLOO": gloo("edp"),
        "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP": group(intra_edp),
        "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP_GLOO": gloo(intra_edp),
        "_INTER_PARTIAL_EXPERT_DATA_PARALLEL_GROUP": group("inter-edp") if partial else None,
        # one optimizer instance spans the whole world: Megatron's group is the default group
        "_INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": (
            group("intra-dist-opt") if partial else dist.group.WORLD
        ),
        "_VIRTUAL_PIPELINE_MODEL_PARALLEL_RANK": None if topology.vpp is None else 0,
        "_VIRTUAL_PIPELINE_MODEL_PARALLEL_WORLD_SIZE": topology.vpp,
    }
    held = [g for name, g in values.items() if name.endswith(("_GROUP", "_GLOO", "_AG"))]
    held += levels
    distinct = {id(g): g for g in held if g is not None and g is not dist.group.WORLD}
    # Megatron's list of the groups this rank holds (None is the default group), for
    # update_pg_timeout()
    values["_global_process_group_list"] = [None, *distinct.values()]
    return values


def _all_gather_group() -> Any:
    """The separate all-gather communicator of dp-cp, where the façade made one."""
    separate = getattr(_the_facade(), "has_separate_all_gather_group", None)
    if separate is None or not separate():
        return None
    return _the_facade().get_data_parallel_group(
        with_context_parallel=True, independent_all_gather=True
    )


def _clear(state: ModuleType) -> None:
    """Empty every global :func:`_published` filled (Megatron's destroy forgets some)."""
    global _live
    for name in _GLOBALS:
        setattr(state, name, None)
    state._global_process_group_list = None
    _live = False
