"""The pre-launch check and host placement of a multi-module layout (:class:`~topology.Modules`)."""
