"""The layout algebra: no Megatron words, only ranks, runs and axes.

- ``runs``: shape:stride runs, the mixed-radix arithmetic every group is made of;
- ``ranks``: :class:`Ranks`, one group held as runs;
- ``groups``: :class:`GroupList`, the one group-sequence type, and its two implementations;
- ``grid``: :class:`Grid`, named axes over a range of ranks;
- ``hierarchy``: hierarchical sub-groups of one group;
- ``spans``: how many units (nodes, NVLink domains) a family of groups touches.
"""
