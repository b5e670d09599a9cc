"""Generators: the interface, the offline and LLM generators, the derived transformation space and its parser."""
