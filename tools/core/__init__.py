"""The data a measurement is about: tasks, candidates, measurement results, bins, and the checks on what a candidate may be."""
