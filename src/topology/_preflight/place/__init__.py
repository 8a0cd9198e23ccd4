"""``place``: the host order that keeps the chattiest groups inside racks and switches (private)."""
