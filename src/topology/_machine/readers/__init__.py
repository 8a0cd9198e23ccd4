"""One reader per allocation format, each returning an :class:`~topology.Allocation` (private)."""
