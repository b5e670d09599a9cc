"""Forecasters: the forecast type, the roofline prior, the learned forest, their blend, LLM and local models, and scoring."""
