"""TEMPORARY test shim of the membership interface ``JobRuntime`` is gaining ("Final means
final": ``retire_origin``, ``master_urls``). Installed only where the runtime lacks them, so
the tests that use it run against the real runtime unchanged once it has them; delete this
module then.

The shim's ``retire_origin`` keeps to the documented contract: ``LookupError`` when this agent
masters none of the job's trees, ``KeyError`` when ``origin`` is neither this agent (which
reads the job's input: an origin of it) nor in :data:`MEMBERS` (origins a test declares),
else it records the call in :data:`RETIRED` and answers
``{"origin", "from_epoch", "partial_epochs"}``. ``master_urls`` asks each tree where its
master is (the trees' public ``where`` query) or answers this agent's URL for trees it roots.

Run as a script (``python membership_shim.py ARGS``) it installs itself and runs the ``elf``
command line with ARGS: an ``elf agent`` process whose runtime has the interface.
"""

from __future__ import annotations

import sys
from typing import Any

from agent.runtime.job import JobRuntime

#: origins the shim treats as members of every job
MEMBERS: set[int] = set()
#: (data URL of the master, job, origin, why) of each shimmed retirement
RETIRED: list[tuple[str, str, int, str]] = []


def installed() -> bool:
    """Install the shim where the runtime lacks the interface; True when it did."""
    if hasattr(JobRuntime, "retire_origin") and hasattr(JobRuntime, "master_urls"):
        return False
    JobRuntime.retire_origin = _retire_origin  # type: ignore[attr-defined]
    JobRuntime.master_urls = _master_urls  # type: ignore[attr-defined]
    return True


def _retire_origin(self: JobRuntime, origin: int, why: str) -> dict[str, Any]:
    if "master" not in self.roles():
        raise LookupError(f"this agent masters none of {self.name!r}'s trees")
    if origin not in MEMBERS and origin != self.network.node_id:
        raise KeyError(origin)
    RETIRED.append((self.network.data_url, self.name, origin, why))
    return {"origin": f"{origin:040x}", "from_epoch": 7, "partial_epochs": 2}


async def _master_urls(self: JobRuntime) -> list[str]:
    trees = self.network.trees
    assert trees is not None
    urls = []
    for tid in self.tree_list:
        view = trees.view(tid)
        if view is not None and view.is_root:
            urls.append(self.network.data_url)
        else:
            reply = await trees.query(tid, {"op": "where"}, timeout=5.0)
            urls.append(str(reply["data_url"]))
    return urls


if __name__ == "__main__":
    installed()
    from agent.cli import cli

    cli(sys.argv[1:], prog_name="elf")
