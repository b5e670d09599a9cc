"""The application layer behind :mod:`kernelcast.api`: what the front doors ask for, one module per concern.

Doors (the CLI, chat, MCP) import only ``kernelcast.api`` (and the vocabulary in ``tools/core``); ``api`` takes
its names from here, from :mod:`kernelcast.session` and from the views. These modules are the only front
modules, with the sessions, the studio and the views, that reach ``graphs``, ``agents`` and the store or
hardware below them (the import contract in pyproject.toml).
"""
