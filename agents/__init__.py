"""Model side of kernelcast: generators, forecasters, the LLM client, and forecaster training.

Imports ``tools`` for data types only; nothing here touches hardware. Submodules
are imported explicitly (``from kernelcast.agents.forecast.base import Forecast``) so importing
the package stays cheap: litellm and scikit-learn load only when used.
"""

from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"  # shipped data: the seed dataset, its replay, the probe tasks
