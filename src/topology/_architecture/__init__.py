"""What a model is: a decoder's shapes and published sizes, and the table of presets (private).

One layer below everything that reasons about a model: the cost model (``topology.cost.MODELS``)
and the transfer's weight lists (``topology.weights``) are views of :data:`presets.ARCHITECTURES`.
"""
