"""The machines a job really gets: hosts in launcher order, the tiers above them, and the readers.

``model`` (Allocation, launcher orders), ``hosts`` (Host, Tier), ``rankmap`` (rank -> host, GPU
and domain per tier), ``hostlist`` (Slurm's compressed host lists), and one reader per format:
``native_format`` (our TOML/JSON, docs/allocation.md), ``slurm_topology`` (topology.conf),
``topograph`` (NVIDIA Topograph's graph JSON) and ``hostfile``.
"""
