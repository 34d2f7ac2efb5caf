"""Fresh identifiers, shared by the agent, the engine and storage (a leaf: imports nothing of ours).

Message, run and snapshot ids are not secrets, so they are drawn fast; approval ids travel in button values,
so they come from :mod:`secrets`.
"""

from __future__ import annotations

import random
import secrets


def new_id() -> str:
    """Return a fresh unique identifier: 128 random bits as 32 hex digits.

    Ids name messages, runs and snapshots; they are not secrets (approval ids, which travel in buttons,
    come from :mod:`secrets`). ``random`` draws them without a system call per id, which uuid4's
    ``os.urandom`` costs: measurable in bench/engine.py, where every message gets one.
    """
    return f"{random.getrandbits(128):032x}"


def new_approval_id() -> str:
    """A fresh approval id: an unguessable token (it travels in button values).

    >>> len(new_approval_id())
    22
    """
    return secrets.token_urlsafe(16)
