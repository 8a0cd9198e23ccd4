"""The layout algebra: shape:stride runs of ranks, group sequences, grids, hierarchies."""
