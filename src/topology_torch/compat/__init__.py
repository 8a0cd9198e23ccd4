"""Drop-in façades with the names of the systems rank-topology replaces.

``compat.megatron`` (Megatron-core ``parallel_state``), ``compat.ezpz`` (ezpz / fairscale
``tp``) and ``compat.ml`` (ml-starter ``ml.utils.parallel``). Each one keeps its state in the one
default ``topology_torch.current()``, so layers and ops see the groups a façade initialised.
Unlike the originals, every rank gets the group that contains it, and bad input raises an error
that says what to do.
"""
