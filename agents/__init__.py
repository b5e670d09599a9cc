"""Model side of kernelcast: forecasters (LLM and learned), the LLM client, bins and scoring.

Imports ``tools`` for data types only; nothing here touches hardware. Submodules
are imported explicitly (``from kernelcast.agents.forecast import Forecast``) so importing
the package stays cheap: litellm and scikit-learn load only when used.
"""
