"""Megatron's parallel layout: group kinds, validation, Topology, pipelines, rank info."""
