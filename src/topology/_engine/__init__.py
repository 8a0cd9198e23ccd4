"""Generation engines as the destination of a refit: their layouts and how they shard (private).

A layer of its own, below the transfer planner that will read it, above only the base modules and
the model table (``_architecture``: the roles and a model's head counts). Two modules:
:mod:`.layout` (``EngineLayout``: an engine, its tp/dp/ep and each rank's coordinates) and
:mod:`.rules` (the table of each engine's rule per role: which slices of a Hugging Face tensor a
rank holds, and where they land in its local tensor). Each rule transcribes the engine's own
``weight_loader`` code; ``docs/engines.md`` cites the lines.
"""
