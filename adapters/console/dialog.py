"""Asking the person at the terminal about each pending call: ``y`` approve, ``n`` reject, ``m`` modify.

The dialog only translates answers into :class:`~bot.engine.model.DecisionRequest` s; the engine
decides whether they are allowed and what they mean, and its refusals are shown as they are.
Enter alone never approves: an empty or unknown answer asks again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rich.text import Text

from adapters.console.reader import Reader
from adapters.console.surface import ConsoleSurface, inert
from bot.engine.errors import ApprovalNotFound, EngineError, InvalidEdit
from bot.engine.justification import JustificationRequired
from bot.engine.model import BREAKGLASS, CONFIRM, MODIFY, REJECT, RESPOND, ApprovalView, DecisionRequest
from bot.engine.presentation import truncate, value_text
from bot.redaction import MASK, is_secret_key, mask_for_display

if TYPE_CHECKING:
    from bot.engine.engine import Engine

CHOICES = {"y": CONFIRM, "yes": CONFIRM, "n": REJECT, "no": REJECT, "m": MODIFY, "modify": MODIFY}
REVIEW_CHOICES = {"y": CONFIRM, "yes": CONFIRM, "n": REJECT, "no": REJECT, "e": MODIFY, "edit": MODIFY}
RESPOND_CHOICES = {"r": RESPOND, "respond": RESPOND}
"""Issue 30: answer in the tool's place, offered for a ``respondable`` tool."""
REASK = "Please answer y (run it), n (reject it) or m (modify its parameters); Enter alone does not approve."
REVIEW_REASK = "Please answer y (release the result), n (reject it) or e (edit it); Enter alone does not approve."
CURRENT_LIMIT = 200


class ApprovalDialog:
    """Asks about pending calls until none is left that this person can answer."""

    def __init__(self, engine: Engine, surface: ConsoleSurface, reader: Reader, user: str) -> None:
        """``user`` is the actor of every decision (the console user id)."""
        self._engine = engine
        self._surface = surface
        self._reader = reader
        self._user = user

    async def settle(self, approvals: Sequence[ApprovalView]) -> None:
        """Ask about each of ``approvals``, wait for the resumed run, then ask about the next step's calls."""
        batch = list(approvals)
        while batch:
            for index, view in enumerate(batch, start=1):
                await self.decide(view, index, len(batch))
            with self._surface.busy():
                await self._engine.wait_idle()  # the resumed run's answer prints before the next prompt
            batch = self._surface.take_rendered()

    async def decide(self, view: ApprovalView, index: int = 1, total: int = 1) -> None:
        """Ask about one call and send the decision; re-ask an edit the engine finds invalid."""
        try:
            view = await self._engine.get_approval(view.approval_id)
        except ApprovalNotFound:
            return
        if not view.is_pending:  # decided meanwhile (expired, or decided elsewhere)
            return
        missing = self._engine.not_configured(view)
        if missing is not None:  # said before asking: it can only be rejected (or left waiting)
            self._say(str(missing), "yellow")
            rejection = await self._ask_reject(view, index, total)
            if rejection is None:
                return
            request = rejection
        else:
            request = await self._ask(view, index, total)
        while True:
            try:
                with self._surface.busy():
                    result = await self._engine.decide(request)
            except InvalidEdit as err:
                self._say(str(err), "red")
                if view.is_review:
                    request = await self._ask(view, index, total)
                else:
                    request = await self._fix_edit(view, index, total, request, set(err.errors))
                continue
            except JustificationRequired as err:  # issue 31: ask for the reason, then decide again with it
                self._say(str(err), "yellow")
                reason = await self._ask_feedback("Reason for approving (required; Enter alone cancels): ")
                if not reason:
                    return
                request = replace(request, feedback=reason)
                continue
            except EngineError as err:
                self._say(str(err), "red")
                return
            if result.approval.is_pending:  # a vote towards a quorum: say where it stands
                self._say(result.message, "yellow")
            return

    async def _fix_edit(
        self, view: ApprovalView, index: int, total: int, request: DecisionRequest, invalid: set[str]
    ) -> DecisionRequest:
        """Ask again for the invalid fields (Enter now restores the original value), or start over."""
        edits = dict(request.edited_params or {})
        fields = [name for name in self._fields(view) if name in invalid]
        if fields:
            for name in fields:
                edits.pop(name, None)
            edits = await self._ask_edits(view, edits, only=fields)
            if edits:
                return replace(request, edited_params=edits)
            self._say("Nothing is changed now; choose again.", "yellow")
        return await self._ask(view, index, total)

    async def _ask(self, view: ApprovalView, index: int, total: int) -> DecisionRequest:
        label = view.tool_name if total == 1 else f"{view.tool_name} ({index} of {total})"
        if view.is_review:
            return await self._ask_review(view, label)
        glass_at = await self._engine.breakglass_at(view.approval_id)  # issue 31
        while True:
            action = await self._ask_choice(
                label, glass_at is not None and view.requester == self._user, respondable=view.respondable
            )
            if action == BREAKGLASS:
                reason = await self._ask_feedback("Reason for breaking glass (required; Enter alone cancels): ")
                if not reason:
                    continue
                return DecisionRequest(
                    view.approval_id, self._user, BREAKGLASS, feedback=reason, actor_name=self._user, place=self._place
                )
            if action == RESPOND:
                text = await self._ask_feedback("Your answer for the assistant (the tool will not run): ")
                if not text:  # Enter alone must not turn into a decision
                    self._say("No answer was given; choose again.", "yellow")
                    continue
                return DecisionRequest(
                    view.approval_id, self._user, RESPOND, feedback=text, actor_name=self._user, place=self._place
                )
            if action == CONFIRM:
                return DecisionRequest(view.approval_id, self._user, CONFIRM, actor_name=self._user, place=self._place)
            if action == REJECT:
                feedback = await self._ask_feedback("Why? Feedback for the assistant (optional, Enter to skip): ")
                return DecisionRequest(
                    view.approval_id, self._user, REJECT, feedback=feedback, actor_name=self._user, place=self._place
                )
            if not self._fields(view):
                self._say("This tool has no parameters to modify.", "yellow")
                continue
            edits = await self._ask_edits(view, {})
            if not edits:
                # Pressing Enter through every field must not turn into an approval.
                self._say("Nothing was changed; choose again.", "yellow")
                continue
            feedback = await self._ask_feedback("Note for the assistant (optional, Enter to skip): ")
            return DecisionRequest(
                view.approval_id,
                self._user,
                MODIFY,
                feedback=feedback,
                edited_params=edits,
                actor_name=self._user,
                place=self._place,
            )

    async def _ask_reject(self, view: ApprovalView, index: int, total: int) -> DecisionRequest | None:
        """Reject a call that can't run here, or leave it waiting (``None``)."""
        label = view.tool_name if total == 1 else f"{view.tool_name} ({index} of {total})"
        while True:
            answer = (await self._reader.read(f"Reject {label}? [y] reject · [n] leave it waiting: ")).strip().lower()
            if answer in ("n", "no"):
                self._say("Left waiting; continue this thread once the tool is configured.", "dim")
                return None
            if answer in ("y", "yes"):
                feedback = await self._ask_feedback("Why? Feedback for the assistant (optional, Enter to skip): ")
                return DecisionRequest(
                    view.approval_id, self._user, REJECT, feedback=feedback, actor_name=self._user, place=self._place
                )
            self._say("Please answer y (reject it) or n (leave it waiting).", "yellow")

    async def _ask_review(self, view: ApprovalView, label: str) -> DecisionRequest:
        """A result held for review: release it, reject it with feedback, or give the model other text."""
        while True:
            answer = await self._reader.read(
                f"Release the result of {label} to the assistant? [y] approve · [n] reject · [e] edit result: "
            )
            action = REVIEW_CHOICES.get(answer.strip().lower())
            if action is None:
                self._say(REVIEW_REASK, "yellow")
                continue
            request = DecisionRequest(view.approval_id, self._user, action, actor_name=self._user, place=self._place)
            if action == REJECT:
                feedback = await self._ask_feedback("Why? Feedback for the assistant (optional, Enter to skip): ")
                return replace(request, feedback=feedback)
            if action == MODIFY:
                text = (await self._reader.read("New result for the assistant: ")).strip()
                if not text:  # Enter alone must not turn into a release
                    self._say("Nothing was changed; choose again.", "yellow")
                    continue
                return replace(request, edited_result=text)
            return request

    async def _ask_choice(self, label: str, glass: bool = False, *, respondable: bool = False) -> str:
        """``glass``: break-glass is on for the call and this is its requester (the engine says whether it is
        too early, and checks the rest). ``respondable``: the tool may be answered in its place."""
        choices = {**CHOICES, **RESPOND_CHOICES} if respondable else CHOICES
        extra = (" · [r] respond" if respondable else "") + (
            " · [b] break glass (if nobody decided in time)" if glass else ""
        )
        while True:
            answer = await self._reader.read(f"Run {label}? [y] approve · [n] reject · [m] modify{extra}: ")
            action = choices.get(answer.strip().lower())
            if glass and answer.strip().lower() in ("b", "break"):
                return BREAKGLASS
            if action is not None:
                return action
            self._say(REASK, "yellow")

    async def _ask_feedback(self, prompt: str) -> str | None:
        return (await self._reader.read(prompt)).strip() or None

    async def _ask_edits(
        self, view: ApprovalView, edits: dict[str, Any], only: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Ask for each field (or only the fields in ``only``); Enter keeps the shown value.

        Values are sent as typed: the engine reads them by the tool's JSON schema (numbers, booleans,
        JSON for lists and objects).
        """
        fields = list(only) if only is not None else self._fields(view)
        self._say("Type a new value for each parameter, or press Enter to keep it.", "dim")
        edits = dict(edits)
        for name in fields:
            raw = await self._ask_value(view, name, edits)
            if raw is not None:
                edits[name] = raw
        return edits

    async def _ask_value(self, view: ApprovalView, name: str, edits: dict[str, Any]) -> str | None:
        """One field's new value, asked again until the engine finds it fits (``None``: Enter kept the shown one)."""
        secret = is_secret_key(name)
        schema = (view.parameters_schema.get("properties") or {}).get(name) or {}
        if name in edits or name in view.arguments:
            shown = edits[name] if name in edits else view.arguments[name]
            current = MASK if secret else truncate(value_text(mask_for_display(shown)), CURRENT_LIMIT)[0]
        elif "default" in schema:  # not set: the tool runs with its default
            current = MASK if secret else truncate(value_text(schema["default"]), CURRENT_LIMIT)[0] + ", the default"
        else:
            current = "not set"
        while True:
            raw = await self._reader.read(f"  {inert(name)} (current: {inert(current)}): ", secret=secret)
            if not raw.strip():
                return None
            error = self._engine.edit_value_error(view, name, raw)
            if error is None:
                return raw
            self._say(f"{name}: {error}. Type it again, or press Enter to keep it.", "red")

    @property
    def _place(self) -> str | None:
        """The terminal's conversation: the place every answer here is given in."""
        return self._surface.thread.place if self._surface.thread else None

    @staticmethod
    def _fields(view: ApprovalView) -> list[str]:
        """The call's arguments, then the schema's other parameters (so an optional one can be set)."""
        properties = view.parameters_schema.get("properties") or {}
        return list(view.arguments) + [name for name in properties if name not in view.arguments]

    def _say(self, text: str, style: str) -> None:
        self._surface.say(Text(inert(text), style=style))
