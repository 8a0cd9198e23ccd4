"""Drop-in façades with the names of the systems rank-topology replaces.

``compat.megatron`` (Megatron-core ``parallel_state``, and ``install()`` to put our groups under
Megatron's own module), ``compat.fairscale`` (fairscale's ``nn.model_parallel``), ``compat.ezpz``
(ezpz ``tp``), ``compat.ml`` (ml-starter ``ml.utils.parallel``), ``compat.ml_lora`` (the LoRA
wrappers ml-starter's tests apply to the parallel layers) and ``compat.deepspeed`` (DeepSpeed's
``ProcessTopology`` family and ``PipelineParallelGrid``, answered by a core
:class:`topology.Grid`; a grid object holds its own groups, as DeepSpeed's does) and
``compat.torchtitan`` (torchtitan's ``ParallelDims``, whose meshes are slices and flattens of one
world mesh on our communicators; each instance holds its own groups). The others keep
their state in the one default ``topology_torch.current()``, so layers and ops see the groups a
façade initialised.
Unlike the originals, every rank gets the group that contains it, and bad input raises an error
that says what to do: a :class:`topology.TopologyError` that is also the ``AssertionError`` or
``RuntimeError`` the peer raises there (``compat._errors``).
"""
