"""Real devices: backends, the measurement harness and its isolated worker, device probes and runtimes, and the measurers."""
