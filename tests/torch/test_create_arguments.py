"""ProcessGroups.create refuses every invalid argument with a TopologyError, whatever its type.

A one-rank gloo world in this process (a HashStore): no other rank is needed to validate, and a
local error is raised as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._C._distributed_c10d import HashStore

from topology import Topology, TopologyError
from topology_torch import ProcessGroups

KINDS = [*Topology(1).kinds, "mp", "xp", "", "tp-tp"]
BACKENDS = ["gloo", "GLOO", "nccl", "mpi", "ucc", "xccl", "fake", "undefined", "bogus"]
STRATEGIES = ["auto", "all", "local", "split", "fast", "AUTO"]


@pytest.fixture(scope="module")
def one_rank() -> Iterator[None]:
    """The default group: gloo, one rank, a HashStore in this process."""
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


INVALID: list[tuple[dict[str, Any], str]] = [
    ({"kinds": 5}, r"^kinds must be a sequence of kinds such as \('tp', 'pp'\), got 5$"),
    ({"kinds": [5]}, r"^kinds names unknown kind 5; valid kinds: dp-cp, dp, "),
    ({"kinds": {"tp": 1}}, r"^kinds must be a sequence of kinds such as \('tp', 'pp'\), got \{"),
    ({"gloo": 5}, r"^gloo must be a sequence of kinds such as \('tp', 'pp'\), got 5$"),
    (
        {"backend": "bogus"},
        r"^backend 'bogus' cannot be used here: torch.distributed knows no such backend; "
        r"use one of gloo, nccl, ",
    ),
    ({"backend": 5}, r"^backend must be a backend name like 'gloo' or None, got 5$"),
    ({"backends": "gloo"}, r"^backends must map kinds to backend names, got 'gloo'; e.g. "),
    (
        {"backends": {"tp": 5}},
        r"^backends\['tp'\] must be a backend name like 'gloo' or None, got 5",
    ),
    ({"backends": {5: "gloo"}}, r"^backends maps kinds to settings, but a key is 5; use kind "),
    ({"timeout": timedelta(seconds=-1)}, r"^timeout must be a positive datetime.timedelta .*-1"),
    (
        {"timeout": timedelta(0)},
        r"^timeout must be a positive datetime.timedelta .*got datetime.timedelta\(0\)",
    ),
    ({"timeout": {"tp": timedelta(0)}}, r"^timeout must be a positive datetime.timedelta "),
    ({"timeout": 30}, r"^timeout must be a positive datetime.timedelta .*got 30; e.g. "),
    (
        {"topology": "tp2"},
        r"^topology must be a topology.Topology, Grid or AxisGroups, got str; build one with ",
    ),
    ({"strategy": "fast"}, r"^strategy 'fast' is not known; use one of 'auto', 'all', "),
    ({"strategy": ["local"]}, r"^strategy \['local'\] is not known; use one of "),
    ({"strategy": "split"}, r"^strategy 'split' needs an NCCL default group bound to a device"),
    ({"arrival_timeout": 0}, r"^arrival_timeout must be a positive datetime.timedelta, got 0;"),
    (
        {"arrival_timeout": timedelta(seconds=-5)},
        r"^arrival_timeout must be a positive datetime.timedelta, got datetime.timedelta\(days=-1",
    ),
    ({"agree": 1}, r"^agree must be True or False, got 1$"),
    ({"agree": None}, r"^agree must be True or False, got None$"),
    ({"agree": "no"}, r"^agree must be True or False, got 'no'$"),
    ({"agree": [False]}, r"^agree must be True or False, got \[False\]$"),
    (
        {"agree": False, "strategy": "local"},
        r"^strategy 'local' needs the agreement round; with agree=False use strategy='all' or ",
    ),
    (
        {"agree": False, "strategy": "split"},
        r"^strategy 'split' needs the agreement round; with agree=False use strategy='all' or ",
    ),
    ({"agree": False, "strategy": "fast"}, r"^strategy 'fast' is not known; use one of 'auto'"),
    ({"agree": False, "kinds": 5}, r"^kinds must be a sequence of kinds such as \('tp', 'pp'\)"),
    ({"agree": False, "arrival_timeout": 0}, r"^arrival_timeout must be a positive datetime."),
    ({"check_backends": 1}, r"^check_backends must be True or False, got 1$"),
    ({"check_backends": None}, r"^check_backends must be True or False, got None$"),
]


@pytest.mark.parametrize(("kwargs", "message"), INVALID, ids=[m for m, _ in enumerate(INVALID)])
def test_invalid_arguments_raise_topology_errors_saying_what_is_valid(
    one_rank: None, kwargs: dict[str, Any], message: str
) -> None:
    """Each invalid argument gets one TopologyError naming it, its value and what is valid."""
    arguments = {"topology": Topology(1), **kwargs}
    topology = arguments.pop("topology")
    with pytest.raises(TopologyError, match=message):
        ProcessGroups.create(topology, **arguments)


NCCL_USABLE = dist.is_nccl_available() and torch.cuda.is_available()
"""Whether this machine can make NCCL groups (a torch built with NCCL and a CUDA device)."""
NCCL = [({"backend": "nccl"}, "tp"), ({"backends": {"pp": "nccl"}}, "pp")]
NCCL += [({"agree": False, "backend": "nccl"}, "dp")]


@pytest.mark.parametrize(("kwargs", "kind"), NCCL, ids=["backend", "backends", "agree-false"])
def test_nccl_is_refused_without_cuda_and_used_with_it(
    one_rank: None, kwargs: dict[str, Any], kind: str
) -> None:
    """'nccl' is refused, naming CUDA and NCCL, where either is missing; used where both are."""
    if not NCCL_USABLE:
        where = r"backends\['pp'\]" if "backends" in kwargs else "backend"
        with pytest.raises(
            TopologyError,
            match=rf"^{where} 'nccl' cannot be used here: it needs CUDA devices and a torch built "
            r"with NCCL; use 'gloo' on CPUs$",
        ):
            ProcessGroups.create(Topology(1), **kwargs)
        return
    with ProcessGroups.create(Topology(1), **kwargs) as groups:
        assert dist.get_backend(groups.group(kind)) == "nccl"
        assert dist.get_process_group_ranks(groups.group(kind)) == [0]


def test_unchecked_backends_go_to_torch_as_given(one_rank: None) -> None:
    """check_backends=False (Megatron's HyperCommGrid façade): 'nccl' is not refused up front;
    torch's new_group gets it and decides (a CPU torch raises its own RuntimeError)."""
    with ProcessGroups.create(Topology(1), backend="nccl", check_backends=False) as groups:
        if not NCCL_USABLE:
            with pytest.raises(RuntimeError, match="NCCL"):
                groups.group("tp")  # a singleton, made on first use
            return
        assert dist.get_backend(groups.group("tp")) == "nccl"


def test_an_invalid_arrival_deadline_in_the_environment_is_a_topology_error(
    one_rank: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$TOPOLOGY_TORCH_ARRIVAL_TIMEOUT must be a positive number of seconds."""
    for text in ("soon", "0", "-3", "nan", "inf"):
        monkeypatch.setenv("TOPOLOGY_TORCH_ARRIVAL_TIMEOUT", text)
        with pytest.raises(
            TopologyError,
            match=rf"^TOPOLOGY_TORCH_ARRIVAL_TIMEOUT must be a positive number of seconds, "
            rf"got '{text}'; e.g. ",
        ):
            ProcessGroups.create(Topology(1))


# -- arguments of every type ---------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.complex_numbers(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.timedeltas(),
    st.builds(object),
    st.just(Topology(1)),
    st.sampled_from(KINDS + BACKENDS + STRATEGIES),
)
_hashables = st.one_of(st.integers(), st.text(max_size=3), st.sampled_from(KINDS))
anything = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.lists(inner, max_size=3).map(iter),
        st.frozensets(_hashables, max_size=3),
        st.dictionaries(_hashables, inner, max_size=3),
    ),
    max_leaves=6,
)
_kind_lists = st.lists(st.sampled_from(KINDS), max_size=4)
_backends = st.sampled_from([None, *BACKENDS])
_timeouts = st.one_of(st.none(), st.timedeltas())


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    topology=st.one_of(st.just(Topology(1)), anything),
    kinds=st.one_of(st.none(), _kind_lists, anything),
    backend=st.one_of(_backends, anything),
    backends=st.one_of(st.none(), st.dictionaries(st.sampled_from(KINDS), _backends), anything),
    timeout=st.one_of(_timeouts, st.dictionaries(st.sampled_from(KINDS), _timeouts), anything),
    gloo=st.one_of(_kind_lists, anything),
    strategy=st.one_of(st.sampled_from(STRATEGIES), anything),
    arrival_timeout=st.one_of(_timeouts, anything),
    agree=st.one_of(st.booleans(), anything),
)
def test_only_topology_errors_escape_create_whatever_the_arguments(
    one_rank: None,
    topology: Any,
    kinds: Any,
    backend: Any,
    backends: Any,
    timeout: Any,
    gloo: Any,
    strategy: Any,
    arrival_timeout: Any,
    agree: Any,
) -> None:
    """Any arguments (with or without agreement): create returns working groups or raises
    TopologyError, nothing else."""
    try:
        groups = ProcessGroups.create(
            topology,
            kinds=kinds,
            backend=backend,
            backends=backends,
            timeout=timeout,
            gloo=gloo,
            strategy=strategy,
            arrival_timeout=arrival_timeout,
            agree=agree,
        )
    except TopologyError:
        return
    with groups:
        for kind in groups.kinds:  # singletons are made on first use: make every one
            if groups.has_group(kind):
                assert dist.get_process_group_ranks(groups.group(kind)) == [0]
