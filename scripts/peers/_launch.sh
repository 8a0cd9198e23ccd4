# Sourced (not run) by the peer runners of this folder that run a peer's test file on our code
# (bridge_communicator, device_mesh, hyper_comm_grid, megatron, megatron_pgc,
# mimo_hetero_topology, torchtitan): the launch they share. It sets the shell options and
# here (this folder), repo, python and torchrun (the project's .venv), and defines the helpers
# below.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="$repo/.venv/bin/python"
torchrun="$repo/.venv/bin/torchrun"

# peer_extract MIRROR REF TREE PATH...: extract the PATHs at REF from the git directory MIRROR
# into TREE, unless TREE holds them all already.
peer_extract() {
  local mirror="$1" ref="$2" tree="$3" path
  shift 3
  for path in "$@"; do
    if [[ ! -e "$tree/$path" ]]; then
      mkdir -p "$tree"
      git --git-dir="$mirror" archive "$ref" "$@" | tar -x -C "$tree"
      return
    fi
  done
}

# peer_oracle VERSION FILE: print .venv/oracles/megatron-core-VERSION, or exit 2 when FILE (a path
# inside it) is missing: scripts/setup.sh unpacks the wheels.
peer_oracle() {
  local oracle="$repo/.venv/oracles/megatron-core-$1"
  if [[ ! -f "$oracle/$2" ]]; then
    echo "$oracle is missing; run ORACLE=1 scripts/setup.sh" >&2
    exit 2
  fi
  echo "$oracle"
}

# peer_path DIR...: the DIRs (empty ones left out) joined for PYTHONPATH, then the caller's own.
peer_path() {
  local dir joined=""
  for dir in "$@"; do
    [[ -n "$dir" ]] && joined="${joined:+$joined:}$dir"
  done
  echo "$joined${PYTHONPATH:+:$PYTHONPATH}"
}

# peer_port: a free local TCP port for torchrun's rendezvous.
peer_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# peer_run WHO RESULTS TREE SECONDS [NAME=VALUE...] -- COMMAND...: run COMMAND in TREE with the
# NAME=VALUEs in its environment, under a timeout of $PEER_TIMEOUT (default SECONDS) seconds, its
# output in RESULTS/log.txt; a failure is reported with the log's path and the runner goes on.
peer_run() {
  local who="$1" results="$2" tree="$3" seconds="$4"
  shift 4
  local settings=()
  while [[ "$1" != -- ]]; do
    settings+=("$1")
    shift
  done
  shift
  (
    cd "$tree"
    env "${settings[@]}" timeout "${PEER_TIMEOUT:-$seconds}" "$@" >"$results/log.txt" 2>&1
  ) || echo "($who: pytest exited with $?; log: $results/log.txt)"
}

# peer_targets TARGET "ARGUMENTS" "WHO..." [ARGS]: call the runner's run (WHO [ARGS]) for TARGET,
# or for each WHO in turn when TARGET is "all"; any other prints the usage and exits 2.
peer_targets() {
  local target="$1" usage="$2" each="$3" who
  shift 3
  if [[ "$target" == all ]]; then
    for who in $each; do run "$who" "$@"; done
  elif [[ " $each " == *" $target "* ]]; then
    run "$target" "$@"
  else
    echo "usage: $0 $usage" >&2
    exit 2
  fi
}
