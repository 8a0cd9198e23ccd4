"""Refit into a generation engine: a transfer whose destination is an engine's layout (private).

A layer above the transfer planner and the engines' rules: :mod:`.target` gives the planner each
Megatron weight's shards on the engine's ranks (from the rules, via the Hugging Face tensors the
weight is made of), :mod:`.refit` is ``topology.refit`` and where each piece lands in the engine's
local tensors.
"""
