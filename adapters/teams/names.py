"""Display names of Teams users, remembered from the activities they send.

Cards say "Requested by Ana Lopez", not ``29:1a2b…``. Teams sends the sender's name with every
activity; we keep the latest one in the engine's small key → JSON store (``save_conversation``).
Names are untrusted text: cards show them only as plain ``TextRun``s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from adapters.teams.store import ConversationStore
from bot.engine.model import ApprovalView

NAME_LIMIT = 100
_ID_TOKEN = re.compile(r"[\w.@]+(?:[:\-][\w.@]+)+")
"""What a Teams id looks like in a sentence: ``29:1a2b…``, ``19:ops@thread.tacv2``, ``user-id-0``, a UUID."""
MAX_LOOKUPS = 200


def name_key(person_id: str) -> str:
    """Where the display name of one person is kept."""
    return f"teams:name:{person_id}"


async def remember_name(store: ConversationStore, person_id: str, name: str | None) -> None:
    """Keep ``name`` as the display name of ``person_id`` (nothing without a name)."""
    if person_id and name:
        await store.save_conversation(name_key(person_id), {"name": name[:NAME_LIMIT]})


async def display_names(store: ConversationStore, person_ids: Iterable[str | None]) -> dict[str, str]:
    """The known names of ``person_ids`` (unknown ids are left out)."""
    names = {}
    for person_id in {p for p in person_ids if p}:
        record = await store.load_conversation(name_key(person_id))
        if record and isinstance(record.get("name"), str):
            names[person_id] = record["name"]
    return names


def named(views: Sequence[ApprovalView], names: Mapping[str, str]) -> list[ApprovalView]:
    """``views`` with requester, approvers, decider and voided voters shown by name where known (for rendering
    only)."""
    return [
        replace(
            view,
            requester=names.get(view.requester, view.requester),
            approvers=tuple(names.get(a, a) for a in view.approvers),
            decided_by=names.get(view.decided_by, view.decided_by) if view.decided_by else view.decided_by,
            void_votes=tuple(names.get(v, v) for v in view.void_votes),
            breakglass_review=replace(review, reviewer=names.get(review.reviewer, review.reviewer))
            if (review := view.breakglass_review)
            else None,
        )
        for view in views
    ]


async def with_names(store: ConversationStore, views: Sequence[ApprovalView]) -> list[ApprovalView]:
    """Look up and apply the names of everyone ``views`` mention."""
    ids = [v.requester for v in views] + [v.decided_by for v in views] + [a for v in views for a in v.approvers]
    ids += [v.breakglass_review.reviewer for v in views if v.breakglass_review]
    ids += [voter for v in views for voter in v.void_votes]
    return named(views, await display_names(store, ids))


async def named_text(store: ConversationStore, text: str) -> str:
    """``text`` with every id of a person or channel whose name is known replaced by that name.

    The engine's answers (``pending``, ``audit``, ``policy list``, a refused Approve all) name people and
    places by id; Teams never shows ids. Unknown ids stay as they are (the fallback).
    """
    tokens = list(dict.fromkeys(t.rstrip(".") for t in _ID_TOKEN.findall(text)))[:MAX_LOOKUPS]
    names = await display_names(store, tokens)
    if not names:
        return text

    def name_of(match: re.Match[str]) -> str:
        token = match.group(0)
        bare = token.rstrip(".")  # the sentence's full stop is not part of the id
        return names[bare] + token[len(bare) :] if bare in names else token

    return _ID_TOKEN.sub(name_of, text)
