"""The machine a layout runs on: GPUs, hosts, the tiers above them, and the readers of each format.

Below every layer that reasons about real hardware (pre-launch checks, modules, transfers,
reshapes, the cost model). ``cluster`` (:class:`Cluster`: uniform nodes and NVLink domains),
``hosts`` (:class:`Host`, :class:`Tier`, launcher orders), ``allocation`` (:class:`Allocation`:
the hosts a job really got, in launcher order), ``rankmap`` (rank -> host, GPU and domain per
tier), ``hostlist`` (Slurm's compressed host lists), ``textfile`` (reading text inputs safely),
and in ``readers/`` one reader per format: ``native_format`` (our TOML/JSON,
docs/allocation.md), ``slurm_topology`` (topology.conf), ``topograph`` (NVIDIA Topograph's graph
JSON) and ``hostfile``.
"""
