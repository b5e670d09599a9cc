"""Hardware and data side of kernelcast: task specs, measurement backends, the store.

Nothing in this package imports from ``agents``, ``graphs`` or ``kernelcast``.
"""
