"""Makes tests/agent/agent_helpers.py importable (pytest runs with --import-mode=importlib
and tests/ has no packages, so a tests/agent package would shadow the real ``agent``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
