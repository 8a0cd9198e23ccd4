"""Doctests of the torch adapter are collected only where torch is installed."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("torch") else ["src/topology_torch"]
