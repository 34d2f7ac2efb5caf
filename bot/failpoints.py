"""Named crash points for deterministic crash tests: the process exits at once where one is armed.

A crash test starts ``countersign serve`` with ``COUNTERSIGN_FAILPOINT=<name>`` (read by
:mod:`bot.config`, armed at start-up with :func:`arm`); when the code reaches ``failpoint("<name>")``
the process ends with :func:`os._exit` — no ``finally`` blocks, no flushing, exactly like ``kill -9``
at that line. Unarmed, a failpoint is one set lookup and does nothing.

The points (each is reached by every process, in this order through one approved call):

- ``after_decide``: a decision won its compare-and-set (``approvals.decide``) and is stored with its audit
  entry, before the resume starts. A decision that completes its step claims and starts the run in the same
  write, so this process then dies holding the run (recovered when its lease expires); a step decided without
  a claim (decided while stopping, or a concurrent decision of the same step) is resumed by any process.
- ``after_claim``: the run is claimed for its resume, before the agent runs: by the decision that completed the
  step, which starts it in the same write (``paused → running``, with owner and lease), or by a resume of a step
  decided without a claim (``paused → resuming``; the start follows). Either way the dead owner's run is taken
  over once its lease expires, and the recovery finishes the decided step (its approved calls run once).
- ``after_preview_recheck``: a resumed step's approved calls had their previews computed again (issue 30), before
  they are compared and run. A recovery compares them once more: a call whose preview no longer matches the approved
  one never runs (the model is told); one that matches runs once, with its approved preview.
- ``before_ledger``: right before the ledger ``begin`` of a call that is about to run. The run's history not yet
  written (the model's reply with the call, see :mod:`bot.engine.history`) goes in that same write, so a crash
  here leaves the reply unstored too: the run is continued from its snapshot, or retried from history.
- ``after_ledger``: the ledger entry is ``executing`` (and the reply with the call is stored with it), before the
  tool function runs.
- ``after_tool``: the tool returned, before its ledger entry is finished.
- ``while_pausing``: a step's pause is worked out (its approvals, its snapshot), right before it is stored in
  one write (an earlier step's results not yet written, approvals, the run marked paused, the audit entry: all
  or nothing). Databases of older
  versions, which stored the approvals first, may hold a half-done pause; recovery still closes those.
- ``after_pause``: a step's pause is stored (its approvals, the run paused, its approval card owed in the outbox),
  before the card is posted. Whichever process sweeps the outbox next shows the card, once the dying
  process's claim on it has expired.
- ``before_llm``: inside a run, before each call to the model. A step's tool results are written with the run's
  next write (its end, its next pause or ``begin``), so here they are in the ledger but not yet in the history:
  recovery gives each call the ledger's result.
- ``before_reply``: a run's answer is durable in the outbox (and the run finished), before it is posted.

One point *stops* the process instead of ending it:

- ``before_start``: the engine is built (storage open, surfaces registered, the model client loaded), right
  before it starts any work: listening for wake-ups, the start-up recovery, the heartbeat and the sweep. Armed,
  the process stops itself there (``SIGSTOP``) and goes on only when continued (``SIGCONT``). Crash tests start
  their victims ahead of time this way: a victim acts on nothing (takes no run, starts no message) before the
  test that crashes it continues it, so it can never take part in, or die inside, another test's recovery.

>>> arm("before_ledger")
>>> failpoint("after_claim")  # not armed: returns
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable

FAILPOINT_EXIT_CODE = 86
"""The exit status of a process stopped by a failpoint (tests tell it from a real crash)."""
STOP_POINTS = frozenset({"before_start"})
"""The points where an armed process stops itself (``SIGSTOP``) until continued, instead of exiting."""

_armed: frozenset[str] = frozenset()


def arm(names: str | Iterable[str] | None) -> None:
    """Arm the given failpoint names (comma-separated in a string); ``None`` or ``""`` disarms all."""
    global _armed
    if names is None:
        _armed = frozenset()
    elif isinstance(names, str):
        _armed = frozenset(part.strip() for part in names.split(",") if part.strip())
    else:
        _armed = frozenset(names)


def armed() -> frozenset[str]:
    """The names armed now."""
    return _armed


def failpoint(name: str) -> None:
    """Exit the process at once if ``name`` is armed (stop it until continued, for :data:`STOP_POINTS`);
    otherwise do nothing."""
    if name in _armed and name in STOP_POINTS:
        # Said before stopping: whoever reads it knows the process does nothing more until it is continued.
        sys.stderr.write(f"countersign: failpoint {name} reached; stopped until continued\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    if name in _armed:
        sys.stderr.write(f"countersign: failpoint {name} reached; exiting\n")
        sys.stderr.flush()
        os._exit(FAILPOINT_EXIT_CODE)
