"""Routing: which forecast candidates the hardware sees, and what the forecaster may be trusted with."""
