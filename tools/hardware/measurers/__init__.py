"""Every way of measuring behind one interface: a local worker, a pool, Ray actors, a replay of a store."""
