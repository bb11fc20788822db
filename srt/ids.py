"""Job and tree identifiers.

Contract:

* ``app_id(job_name, creator)`` is the job's 160-bit appId: SHA-1 of
  ``f"{creator}\\x00{job_name}"`` as a big-endian int (the paper hashes the job's name with its
  creator's; the NUL byte keeps ``("ab", "c")`` and ``("b", "ca")`` apart);
* ``tree_ids(app, m)`` lists the ids of the job's ``m`` trees: tree 0 is the appId itself,
  tree ``i > 0`` is SHA-1 of the appId's 20 bytes followed by ``i`` as 4 big-endian bytes, so
  every tree id is uniform and the m roots are spread over the overlay;
* ``tree_index(key_hash, m)`` range-partitions the 64-bit key-hash space into m equal,
  contiguous ranges: ``(key_hash * m) >> 64``. A worker splits a CBT snapshot (whose entries
  are ordered by that same hash, ``cbt.hashing.xxh3_64(encode_key(key))``) into m tree
  partitions by slicing the hash order; ``key_tree_index`` does it for one key.
"""

from __future__ import annotations

import hashlib

from cbt.hashing import encode_key, xxh3_64

ID_BITS = 160
ID_BYTES = 20
MAX_TREES = 1 << 16  # far above any sensible m; keeps tree ids cheap to list
_HASH_SPACE = 1 << 64


def _sha1_int(data: bytes) -> int:
    return int.from_bytes(hashlib.sha1(data).digest(), "big")


def app_id(job_name: str, creator: str) -> int:
    """The job's appId (tree 0's id): SHA-1 of ``creator + "\\x00" + job_name``."""
    if not isinstance(job_name, str) or not job_name:
        raise ValueError("job_name must be a non-empty string")
    if not isinstance(creator, str):
        raise ValueError("creator must be a string")
    if "\x00" in creator or "\x00" in job_name:
        raise ValueError("job_name and creator must not contain NUL")
    return _sha1_int(f"{creator}\x00{job_name}".encode())


def placement_id(app: int, salt: int) -> int:
    """The id tree 0 of a job gets with placement ``salt``: the appId itself for salt 0,
    otherwise SHA-1 of the appId's 20 bytes, ``b"placement"`` and the salt (4 bytes). A job's
    submitter may pick among a few salts the one whose root is least loaded ("power of two
    choices"); the salt is part of the job spec, so every agent derives the same ids."""
    if not isinstance(salt, int) or isinstance(salt, bool) or not 0 <= salt < 1 << 32:
        raise ValueError(f"salt must be an int in [0, 2**32), got {salt!r}")
    if salt == 0:
        return app
    return _sha1_int(app.to_bytes(ID_BYTES, "big") + b"placement" + salt.to_bytes(4, "big"))


def tree_ids(app: int, m: int, salt: int = 0) -> list[int]:
    """The ids of a job's ``m`` trees; ``tree_ids(app, m)[0] == app`` (with ``salt`` the
    ids derive from :func:`placement_id` instead of the appId)."""
    if not isinstance(app, int) or isinstance(app, bool) or not 0 <= app < 1 << ID_BITS:
        raise ValueError(f"app id must be a 160-bit int, got {app!r}")
    if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= MAX_TREES:
        raise ValueError(f"m must be an int in [1, {MAX_TREES}], got {m!r}")
    base = placement_id(app, salt)
    raw = base.to_bytes(ID_BYTES, "big")
    return [base] + [_sha1_int(raw + i.to_bytes(4, "big")) for i in range(1, m)]


def tree_index(key_hash: int, m: int) -> int:
    """Which of ``m`` trees owns a key whose 64-bit hash is ``key_hash``."""
    if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= MAX_TREES:
        raise ValueError(f"m must be an int in [1, {MAX_TREES}], got {m!r}")
    if not isinstance(key_hash, int) or not 0 <= key_hash < _HASH_SPACE:
        raise ValueError(f"key_hash must be an unsigned 64-bit int, got {key_hash!r}")
    return (key_hash * m) >> 64


def tree_range(index: int, m: int) -> tuple[int, int]:
    """The half-open hash range ``[lo, hi)`` owned by tree ``index`` of ``m`` (the inverse of
    :func:`tree_index`: ``tree_index(h, m) == index`` exactly for ``lo <= h < hi``)."""
    if not 0 <= index < m:
        raise ValueError(f"index must be in [0, {m})")
    lo = -((-index * _HASH_SPACE) // m)  # ceil(index * 2^64 / m)
    hi = -((-(index + 1) * _HASH_SPACE) // m)
    return lo, hi


def key_tree_index(key: object, m: int) -> int:
    """:func:`tree_index` of a CBT key, hashed the way the CBT hashes it."""
    return tree_index(xxh3_64(encode_key(key)), m)
