# Sourced by the Megatron peer runners: megatron_tag VERSION prints the Megatron-LM tag whose tests
# match a megatron-core release (0.19.2 has no tag of its own: core_v0.19.0's tests), or exits 2.
megatron_tag() {
  case "$1" in
    0.16.1 | 0.17.1 | 0.18.2) echo "core_v$1" ;;
    0.19.2) echo "core_v0.19.0" ;;
    *) echo "VERSION must be 0.16.1, 0.17.1, 0.18.2 or 0.19.2, got $1" >&2; exit 2 ;;
  esac
}
