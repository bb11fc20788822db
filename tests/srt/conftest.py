"""Makes the helper modules in tests/srt importable (pytest runs with --import-mode=importlib
and tests/ has no packages, so a tests/srt package would shadow the real ``srt``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
