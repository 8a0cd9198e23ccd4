#!/usr/bin/env bash
# torch's own test/distributed/test_device_mesh.py with init_device_mesh routed to our world_mesh
# ("ours") or left as torch's ("peer"), on CPU with gloo (the file's classes spawn their 4 or 8
# ranks themselves).
#
#   scripts/peers/device_mesh.sh FILE [ours|peer|all] [pytest args]
#
# FILE is the test file as of the pinned torch 2.13.0 (git cf30153c4c). The v2.13.0 tag itself is
# not reachable from the project's machine (the PyTorch repository is past the mirror's size limit
# and so are its forks; PyPI has no torch sdist), so the file run in the README is the newest copy
# in the code index that matches 2.13.0's internals: the fork vortex-captain/pytorch at 28e21551cb
# (82,939 characters; `read_file` of test/distributed/test_device_mesh.py at that commit, written
# to /tmp, never into this repository). Its opaque-type test names
# _register_distributed_opaque_types in device_mesh.py, which 2.13.0 has; the later copies
# (cyyever, daisyden, vboussot, xjbanana258, sugowslt) name distributed_c10d's
# _register_process_group_opaque_type, which 2.13.0 lacks, and the earlier ones (arsic3,
# laurentdupin, AlBrianPBanzuela) build layouts with _Layout, which 2.13.0 lacks. With a PyTorch
# checkout, use the tag:
#   git -C pytorch show v2.13.0:test/distributed/test_device_mesh.py >/tmp/test_device_mesh.py
# It runs unchanged from a copy in a fresh folder; expecttest (torch's test helpers import it) is
# installed once, without dependencies, into $PEER_DEPS (/tmp/topology-peers/mesh-deps), never
# into .venv. On a loaded 2-core machine a test takes about a minute (4 or 8 spawned ranks each
# import torch): select with -k and raise PEER_TIMEOUT (seconds, default 3600) for a full run.
# device_mesh_harness.py (loaded in every rank by mesh_facades/sitecustomize.py) routes what
# world_mesh claims: init_device_mesh with dimension names builds our groups for every dim and run
# of adjacent dims and our world_mesh over them, so construction, get_group, get_local_rank,
# slicing and _flatten run on our meshes. Two tallies: the tests that built a routed mesh, and the
# others (hand-built DeviceMesh(...)/from_group, unnamed meshes, backend overrides, the layout
# algebra: torch's own code, out of scope), listed by class. Not part of CI.
# shellcheck source=_launch.sh
source "$(dirname "$0")/_launch.sh"
file="${1:?usage: $0 FILE [ours|peer|all] [pytest args]}"
target="${2:-all}"
shift $(( $# > 1 ? 2 : 1 ))
deps="${PEER_DEPS:-/tmp/topology-peers/mesh-deps}"
[[ -f "$file" ]] || { echo "$file: no such file" >&2; exit 2; }
if [[ ! -d "$deps/expecttest" ]]; then
  "$python" -m pip install -q --no-deps --target "$deps" expecttest
fi

run() {  # run TARGET [pytest args]: the file, then the tallies of routed and other tests
  local who="$1"
  shift
  local results
  results="$(mktemp -d -t "device-mesh-$who.XXXX")"
  mkdir -p "$results/tree"
  cp "$file" "$results/tree/test_device_mesh.py"
  peer_run "$who" "$results" "$results/tree" 3600 \
    TOPOLOGY_PEER=device_mesh TOPOLOGY_PEER_IMPL="$who" PEER_RESULTS="$results" \
    PYTHONPATH="$(peer_path "$here/mesh_facades" "$here" "$repo/src" "$deps")" -- \
    "$python" -m pytest test_device_mesh.py --rootdir . \
    -p peer_outcomes -p no:cacheprovider -p no:randomly -o addopts= -q -W ignore "$@"
  "$python" - "$results" <<'PY'
import json, sys
from collections import Counter
from pathlib import Path

folder = Path(sys.argv[1])
outcomes = json.loads((folder / "rank0.json").read_text()) if (folder / "rank0.json").exists() else {}
marked = {p.name.split(".", 1)[-1] for p in (folder / "routed").glob("*")} if (folder / "routed").exists() else set()
routed = {k: v for k, v in outcomes.items() if ".".join(k.split("::")[-2:]) in marked}
other = {k: v for k, v in outcomes.items() if k not in routed}
for name, part in (("routed", routed), ("other", other)):
    (folder / name).mkdir(exist_ok=True)
    (folder / name / "rank0.json").write_text(json.dumps(part, indent=1))
by_class = Counter(k.split("::")[-2] for k in other)
print("not routed (torch's own meshes, out of scope):", ", ".join(f"{c} {n}" for c, n in sorted(by_class.items())))
PY
  "$python" "$here/tally.py" "$results/routed" "test_device_mesh.py, tests on a routed mesh, $who"
  "$python" "$here/tally.py" "$results/other" "test_device_mesh.py, the other tests, $who"
}

peer_targets "$target" "FILE [ours|peer|all] [pytest args]" "peer ours" "$@"
