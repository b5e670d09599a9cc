"""One module per CLI command group; :mod:`kernelcast.cli` assembles them."""
