"""Argument provenance: which arguments of a tool call were copied from untrusted text the run has seen.

Untrusted text is (a) the result of a tool marked ``untrusted_output=True`` (``@tool(untrusted_output=True)``;
an MCP tool source sets the same attribute, e.g. for tools with ``openWorldHint``), and (b) a message in the
thread written by someone other than the run's requester (other people's replies, e.g. in ``all`` reply mode).
The requester's own messages are trusted for their run.

An argument is *tainted* when one of its strings (also inside objects and lists) shares a substring of at least
:data:`WINDOW` characters with untrusted text, after whitespace is normalised (runs of whitespace become one
space, URL schemes are left out: :func:`normalise`), and that substring is not also in the requester's own
messages (a value the user typed is theirs).

The index holds one 64-bit key per window of the untrusted text, in a sorted ``array`` (8 bytes a window) plus a
small dict for recent additions: the window's hash in the high 41 bits and where the window starts in the run's
untrusted text in the low 23. A check costs one binary search per window of the argument, and finding a match's
source and excerpt reads only the positions its key names, whatever the size of the text (``bench/taint.py``).
Nothing new is stored for it: the index is rebuilt from the run's history (which is durable and travels with every
snapshot) by whichever process continues the run, and what a call's check found is stored with its approval
(``ApprovalRecord.provenance``) and its audit entry.
"""

from __future__ import annotations

import bisect
import json
import operator
import re
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

from bot.engine.roles import group_label
from bot.messages import ChatMessage, ChatRole
from bot.redaction import mask_text

if TYPE_CHECKING:
    from bot.hooks.events import HookEvent
    from bot.tools import Tool

WINDOW = 8
"""The shortest shared substring (in characters, whitespace normalised) that marks an argument tainted."""
POSITION_BITS = 23
"""The low bits of an index key: where its window starts in the run's untrusted text (so at most 8,388,608)."""
_POSITION = (1 << POSITION_BITS) - 1
_HASH = ~_POSITION
MAX_UNTRUSTED_CHARS = 8_000_000
"""Untrusted text indexed per run at most (about 64 MB of index; below ``2**POSITION_BITS``); text beyond it is not
indexed, and every later call with a string argument of at least :data:`WINDOW` characters is treated as tainted
(fails closed)."""
EXCERPT_LIMIT = 80
TAINTS = "countersign.taints"
"""The key, in a run's confirmation context, of its :class:`RunProvenance`."""
_MERGE_AT = 1 << 16
_MAX_CANDIDATES = 8
"""Positions of a window's hash tried to name a match's source before reading the sources in full."""


_URL_PREFIX = re.compile(r"\bhttps?://(?:www\.)?", re.IGNORECASE)
"""Boilerplate every URL shares (``https://`` alone is a whole window): left out before windows are taken."""


def normalise(text: str) -> str:
    """Runs of whitespace as one space, no leading or trailing whitespace, and no URL scheme (``https://``,
    ``http://``, with ``www.``): so a URL is tainted by what follows its scheme, not by the scheme alone."""
    return _URL_PREFIX.sub("", " ".join(text.split()))


def _window_hashes(text: str) -> Iterator[int]:
    n = len(text)
    return map(hash, map(text.__getitem__, map(slice, range(n - WINDOW + 1), range(WINDOW, n + 1))))


class WindowIndex:
    """The windows of the texts added, each as its hash (high bits) and where it starts (low bits): see the module
    docstring."""

    def __init__(self) -> None:
        self._sorted = array("q")
        self._recent: dict[int, int] = {}
        """A window's hash (its high bits) → where the newest window with it starts."""

    def add(self, text: str, start: int | None = None) -> None:
        """Index ``text`` (already normalised) whose first character is at ``start`` in the texts indexed (``None``:
        positions are not needed, e.g. trusted text); :meth:`settle` once a batch of texts is added."""
        hashes = map(_HASH.__and__, _window_hashes(text))
        if start is None:
            self._recent.update(zip(hashes, repeat(0), strict=False))
            return
        if start + len(text) > _POSITION + 1:
            raise ValueError(f"an index holds at most {_POSITION + 1} characters of positioned text")
        # A text shorter than a window has no window (zip stops at the hashes); a repeated window: the newest wins.
        self._recent.update(zip(hashes, range(start, start + len(text)), strict=False))

    def settle(self) -> None:
        """Fold the recent dict into the sorted array once it is large (Timsort merges the sorted run in one pass;
        a repeated hash, with another position, does no harm to the binary search)."""
        recent = self._recent
        if len(recent) >= _MERGE_AT:
            self._sorted = array("q", sorted(chain(self._sorted, map(operator.or_, recent.keys(), recent.values()))))
            self._recent = {}

    def hits(self, hashes: Sequence[int]) -> list[bool]:
        """For each hash, whether some indexed window has it."""
        big, recent = self._sorted, self._recent
        size = len(big)
        keys = [h & _HASH for h in hashes]
        found = []
        for key, at in zip(keys, map(bisect.bisect_left, repeat(big), keys), strict=True):
            found.append(key in recent or (at < size and big[at] & _HASH == key))
        return found

    def positions(self, window_hash: int) -> Iterator[int]:
        """Where the indexed windows with this hash start, the newest first (a different window may share the
        hash's high bits: compare the text there)."""
        key = window_hash & _HASH
        newest = self._recent.get(key)
        if newest is not None:
            yield newest
        big = self._sorted
        at = bisect.bisect_right(big, key | _POSITION) - 1
        while at >= 0 and big[at] & _HASH == key:
            yield big[at] & _POSITION
            at -= 1

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent)


@dataclass(frozen=True)
class Source:
    """One piece of untrusted text: a tool's result (``tool``, ``step``) or another person's message (``user``)."""

    text: str
    tool: str | None = None
    step: int | None = None
    user: str | None = None


@dataclass(frozen=True)
class ArgumentTaint:
    """One argument (``path``: ``host``, ``items[0].name``) that carries text from ``source``."""

    path: str
    excerpt: str
    """The shared part of the argument, normalised and cut to :data:`EXCERPT_LIMIT` (mask it to show it)."""
    tool: str | None
    step: int | None
    user: str | None

    def to_dict(self) -> dict[str, Any]:
        """As stored with the approval: the excerpt masked already (the approval's arguments keep the full value)."""
        return {
            "path": self.path,
            "excerpt": mask_text(self.excerpt),
            "tool": self.tool,
            "step": self.step,
            "user": self.user,
        }


class RunProvenance:
    """The untrusted and trusted text a run has seen, indexed, and the taints found for its calls.

    Kept in the run's confirmation context (:data:`TAINTS`), so one process builds it once per run and adds each
    new message as the run goes; another process resuming the run rebuilds it from the snapshot's history.
    """

    def __init__(
        self, tools: Mapping[str, Tool], requester: str | None, *, max_untrusted_chars: int = MAX_UNTRUSTED_CHARS
    ) -> None:
        self.tools = tools
        self.requester = requester
        self.max_untrusted_chars = max_untrusted_chars
        self.untrusted = WindowIndex()
        self.trusted = WindowIndex()
        if max_untrusted_chars > _POSITION + 1:
            raise ValueError(f"max_untrusted_chars is at most {_POSITION + 1}")
        self.sources: list[Source] = []
        self._starts: list[int] = []
        """Where each source starts in the run's untrusted text (as the index positions its windows)."""
        self.untrusted_chars = 0
        self.overflowed = False
        self._seen: set[str] = set()
        self._steps = 0
        self.calls: dict[tuple[str, str | None], list[ArgumentTaint]] = {}
        """The taints of each call checked, by (tool name, call id)."""
        self.escalated: set[tuple[str, str | None]] = set()
        """Calls that would have run without asking, asked because of their taint."""

    # --- what the run has seen ------------------------------------------------------------------------

    def ingest(self, messages: Sequence[ChatMessage]) -> None:
        """Index the messages not seen before (by id), in order."""
        for message in messages:
            key = str(message.meta.get("id") or id(message))
            if key in self._seen:
                continue
            self._seen.add(key)
            self._ingest_one(message)
        self.untrusted.settle()
        self.trusted.settle()

    def _ingest_one(self, message: ChatMessage) -> None:
        role = message.role
        if role == ChatRole.USER:
            author = message.meta.get("user")
            if author is not None and self.requester is not None and author != self.requester:
                self._untrusted(Source(normalise(message.text or ""), user=str(author)))
            elif author is not None:  # the requester's own words (bot notes carry no author: neither)
                self.trusted.add(normalise(message.text or ""))
            if author is not None:
                self._steps = 0  # a person's message starts the steps of a new run
        elif role == ChatRole.ASSISTANT and message.tool_calls:
            self._steps += 1
        elif role == ChatRole.TOOL and message.tool_call_result is not None:
            origin = message.tool_call_result.origin
            tool = self.tools.get(origin.tool_name)
            if tool is not None and getattr(tool, "untrusted_output", False):
                step = self._steps or None
                for text in _result_texts(message.tool_call_result.result):
                    self._untrusted(Source(normalise(text), tool=origin.tool_name, step=step))

    def _untrusted(self, source: Source) -> None:
        if len(source.text) < WINDOW:
            return
        if self.untrusted_chars + len(source.text) > self.max_untrusted_chars:
            self.overflowed = True
            return
        self.untrusted.add(source.text, self.untrusted_chars)
        self._starts.append(self.untrusted_chars)
        self.untrusted_chars += len(source.text)
        self.sources.append(source)

    # --- checking a call ------------------------------------------------------------------------------

    def check(self, arguments: Mapping[str, Any]) -> list[ArgumentTaint]:
        """The tainted strings of a call's arguments (empty: none), without noting them."""
        if not self.sources and not self.overflowed:
            return []
        found: list[ArgumentTaint] = []
        for path, value in _strings(arguments, ""):
            taint = self._check_string(path, value)
            if taint is not None:
                found.append(taint)
        return found

    def _check_string(self, path: str, value: str) -> ArgumentTaint | None:
        text = normalise(value)
        if len(text) < WINDOW:
            return None
        if self.overflowed:
            return ArgumentTaint(path, text[:EXCERPT_LIMIT], None, None, None)
        hashes = list(_window_hashes(text))
        untrusted = self.untrusted.hits(hashes)
        if not any(untrusted):
            return None
        trusted = self.trusted.hits(hashes) if len(self.trusted) else [False] * len(hashes)
        start, length = _longest_run([u and not t for u, t in zip(untrusted, trusted, strict=True)])
        if length == 0:
            return None
        run = text[start : start + length + WINDOW - 1][:EXCERPT_LIMIT]
        found = self._located(run, hashes[start]) or self._scanned(run)
        if found is None:  # a hash collision, not a shared substring
            return None
        source, shared = found
        return ArgumentTaint(path, run[:shared], source.tool, source.step, source.user)

    def _located(self, run: str, first: int) -> tuple[Source, int] | None:
        """The source of ``run`` from the positions the index keeps for its first window (no scan of the text):
        the newest source where the longest part of ``run`` starts, and that part's length (at least a window)."""
        best: tuple[Source, int] | None = None
        for tried, position in enumerate(self.untrusted.positions(first)):
            if tried == _MAX_CANDIDATES:
                break
            at = bisect.bisect_right(self._starts, position) - 1
            source = self.sources[at]
            shared = _shared_prefix(run, source.text, position - self._starts[at])
            if shared >= WINDOW and (best is None or shared > best[1]):
                best = (source, shared)
                if shared == len(run):
                    break
        return best

    def _scanned(self, run: str) -> tuple[Source, int] | None:
        """The newest source holding ``run``'s first window, found by reading every source: only when the index's
        positions named none (its keys keep 41 bits of a hash, so two windows can share one)."""
        for source in reversed(self.sources):
            at = source.text.find(run[:WINDOW])
            if at >= 0:
                return source, _shared_prefix(run, source.text, at)
        return None

    def note(self, tool_name: str, tool_call_id: str | None, taints: list[ArgumentTaint]) -> None:
        """Remember a call's taints (for its pause and audit); an untainted call is forgotten."""
        key = (tool_name, tool_call_id)
        self.escalated.discard(key)  # the confirmation that follows decides it again
        if taints:
            self.calls[key] = taints
        else:
            self.calls.pop(key, None)

    def of_call(self, tool_name: str, tool_call_id: str | None) -> list[ArgumentTaint]:
        """The taints noted for a call (empty: none)."""
        return self.calls.get((tool_name, tool_call_id), [])

    def stored(self, tool_name: str, tool_call_id: str | None) -> dict[str, Any] | None:
        """What an approval stores of a call's taints (``ApprovalRecord.provenance``), or ``None``."""
        taints = self.of_call(tool_name, tool_call_id)
        if not taints:
            return None
        return {
            "tainted": [t.to_dict() for t in taints],
            "escalated": (tool_name, tool_call_id) in self.escalated,
        }


def _result_texts(result: str) -> list[str]:
    """A tool result as the texts to index: the result, and for a JSON result also each string in it decoded (a
    value copied out of JSON carries no escapes: ``\\n``, ``\\"``, ``\\u00e9``)."""
    texts = [result]
    if result[:1] in ("{", "[", '"'):
        try:
            decoded = json.loads(result)
        except ValueError:
            return texts
        texts.extend(value for _, value in _strings(decoded, "") if len(value) >= WINDOW)
    return texts


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():  # type: ignore[union-attr]
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):  # type: ignore[arg-type]
            yield from _strings(item, f"{path}[{i}]")


def _shared_prefix(run: str, text: str, at: int) -> int:
    """How many characters of ``run`` ``text`` holds from ``at`` on (0 when not even its first window)."""
    if not text.startswith(run[:WINDOW], at):
        return 0
    shared, limit = WINDOW, min(len(run), len(text) - at)
    while shared < limit and run[shared] == text[at + shared]:
        shared += 1
    return shared


def _longest_run(flags: list[bool]) -> tuple[int, int]:
    """The start and length of the longest run of ``True`` (length 0: none)."""
    best_start, best, start = 0, 0, -1
    for i, flag in enumerate(flags):
        if flag:
            if start < 0:
                start = i
            if i - start + 1 > best:
                best_start, best = start, i - start + 1
        else:
            start = -1
    return best_start, best


def run_provenance(context: dict[str, Any] | None) -> RunProvenance | None:
    """The run's :class:`RunProvenance` in its confirmation context, if it has one."""
    found = context.get(TAINTS) if context else None
    return found if isinstance(found, RunProvenance) else None


class ProvenanceHook:
    """At ``before_tool`` (after the user's hooks, before the confirmation): note the call's tainted arguments.

    The run's index lives in its confirmation context; a run without one (a bare agent) is left alone.
    """

    def __init__(self, tools: Mapping[str, Tool]) -> None:
        self.tools = tools

    def __call__(self, event: HookEvent) -> None:
        context, call = event.confirmation_strategy_context, event.tool_call
        if context is None or call is None:
            return
        provenance = run_provenance(context)
        if provenance is None:
            requester = context.get("requester")
            provenance = RunProvenance(self.tools, str(requester) if requester is not None else None)
            context[TAINTS] = provenance
        provenance.ingest(event.messages)
        provenance.note(call.tool_name, call.id, provenance.check(call.arguments))


def source_phrase(taint: Mapping[str, Any]) -> str:
    """Where a stored taint came from, in words: "the output of `fetch_url` (step 2)"."""
    tool, step, user = taint.get("tool"), taint.get("step"), taint.get("user")
    if tool:
        return f"the output of `{tool}`" + (f" (step {step})" if step else "")
    if user:
        return "a message by another person in the thread"
    return "more untrusted text than the run can index"


def provenance_lines(provenance: Mapping[str, Any] | None) -> list[str]:
    """Plain lines for a card (the adapter escapes them): one per tainted argument, and why it asks."""
    if not provenance:
        return []
    lines = []
    for taint in provenance.get("tainted") or ():
        lines.append(f"⚠ {taint.get('path')} is from {source_phrase(taint)}: “{taint.get('excerpt', '')}”")
    if provenance.get("escalated"):
        lines.append(
            "Asked because an argument came from untrusted text (this tool would otherwise run without asking)."
        )
    rule = rule_line(provenance.get("rule"))
    if rule:
        lines.append(rule)
    return lines


def rule_line(stored: Mapping[str, Any] | None) -> str | None:
    """The card's line for the rule of a tool's tainted calls kept with an approval (``bot.engine.tainted_rules``)."""
    if not stored:
        return None
    needs = []
    if stored.get("four_eyes"):
        needs.append("someone other than the person who asked")
    if stored.get("approvers"):
        needs.append("one of " + ", ".join(group_label(str(a)) for a in stored["approvers"]))
    return "Because of the untrusted text, approving needs " + " and ".join(needs) + "." if needs else None


def audited_taints(approvals: Sequence[Any]) -> dict[str, list[dict[str, Any]]]:
    """For a pause's audit entry: per approval id, its tainted arguments and where each came from (no excerpt)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for approval in approvals:
        stored = getattr(approval, "provenance", None)
        if stored and approval.approval_id:
            found[approval.approval_id] = [
                {k: t.get(k) for k in ("path", "tool", "step", "user")} for t in stored.get("tainted") or ()
            ]
    return found
