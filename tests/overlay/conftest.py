"""Makes tests/overlay/overlay_helpers.py importable (pytest runs with --import-mode=importlib
and tests/ has no packages, so a tests/overlay package would shadow the real ``overlay``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
