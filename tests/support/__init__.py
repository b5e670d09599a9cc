"""Helpers the test folders share (unit, device, e2e): import them as ``support.<module>``; tests/conftest.py puts
tests/ on sys.path."""
