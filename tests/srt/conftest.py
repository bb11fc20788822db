"""Makes the helper modules in tests/srt and its subfolders importable (pytest runs with
--import-mode=importlib and tests/ has no packages, so a tests/srt package would shadow the
real ``srt``; the subfolders mirror the package's subpackages and share these helpers)."""

import sys
from pathlib import Path

HERE = Path(__file__).parent
for folder in [HERE, *sorted(p for p in HERE.iterdir() if p.is_dir() and p.name != "__pycache__")]:
    sys.path.insert(0, str(folder))
