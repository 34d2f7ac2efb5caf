"""Admin command syntax, one parser for Slack's ``/countersign`` and Teams messages, and how rules read.

``policy list [#channel]``, ``policy set <tool|group|*> <mode> [#channel] [when …]`` (``always``, ``never``,
``once``, ``deny``, ``review``, ``always+review``),
``policy reset <tool> [#channel] [when …]``, ``approvers <tool> <@user|@group ...|none> [when tainted]``,
``quorum <tool> <n>``, ``four-eyes <tool> on|off [when tainted]``, ``ttl <tool> <duration>``,
``respondable <tool> on|off``, ``group set <name> <@user ...>``, ``group list``, ``group delete <name>``,
``access allow|revoke <#channel|*> <@user|@group|everyone>``, ``access list``, ``dm on|off``, ``mcp list``,
``mcp reload``, ``pending``, ``audit [n]``, ``usage [#channel] [days]``, ``help``.
Without ``#channel`` a rule applies to the whole workspace. Approvers may be people, named groups
(``@oncall``) and Slack user groups (``<!subteam^S…>``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.durations import DURATION_SYNTAX, DurationError, duration_seconds, format_duration
from bot.engine.conditions import TAINTED, Condition, parse_condition
from bot.engine.confirmation import MODES
from bot.engine.errors import CommandError
from bot.engine.roles import group_label, platform_group

USAGE = """countersign admin commands:
  policy list [#channel]                                   show the rules and each tool's effective mode
  policy set <tool|group|*> <mode> [#channel] [when …]     always|never|once|deny|review|always+review;
                                                           when env=prod | env in a,b | replicas>10 | tainted
  policy reset <tool|group|*> [#channel] [when …]          remove a rule
  approvers <tool> <@user|@group ...|none>                 who may approve (none: the requester and admins)
  quorum <tool> <n>                                        approvals needed (no more than the approvers)
  four-eyes <tool> on|off                                  the requester may not approve
  four-eyes|approvers <tool> … when tainted                the same, for calls with tainted arguments only
  ttl <tool> <duration>                                    e.g. 30m, 4h, 2d (at most 90d)
  justification <tool> required|off | list                 approving needs a short reason
  respondable <tool> on|off                                approvers may answer in the tool's place (Respond)
  policy set <tool> <mode> … breakglass after <d>|off      the requester may break glass after <d> undecided
  breakglass list | review <id> ok|not-ok [note]           open break-glass reviews; review one
  breakglass run <id> <reason>                             run your undecided call once (after the delay)
  group set <name> <@user ...>                             a named approver group, e.g. group set oncall @ana @ben
  group list                                               the approver groups and their members
  group delete <name>                                      remove an approver group
  access allow <#channel|*> <@user|@group|everyone>        who may ask the bot there (default: everyone)
  access revoke <#channel|*> <@user|@group|everyone>       remove an access rule
  access list                                              who may ask, per channel and workspace
  dm on|off                                                allow or refuse direct messages to the bot
  mcp list                                                 the MCP servers: transport, status, tools, last error
  mcp reload                                               re-read COUNTERSIGN_MCP_CONFIG, restart what changed
  pending                                                  approvals waiting for a decision
  audit [n]                                                the last n audit entries (default 10)
  memory list [#channel]                                   your memories and this channel's (or that channel's)
  memory forget <id>                                       forget one memory (yours; a channel's: admins)
  memory clear me|#channel                                 forget all yours, or all of a channel's (admins)
  usage [#channel] [days]                                  tokens the model used (default: 7 days)
  help                                                     this text
Anyone may list; only admins (COUNTERSIGN_ADMINS) may change policies and channel memories and reload MCP."""

COMMAND_WORDS = (
    "policy",
    "approvers",
    "quorum",
    "four-eyes",
    "ttl",
    "justification",
    "respondable",
    "breakglass",
    "group",
    "access",
    "dm",
    "mcp",
    "pending",
    "audit",
    "memory",
    "usage",
    "help",
)
CHANGES = frozenset(
    {
        "policy set",
        "policy reset",
        "approvers",
        "quorum",
        "four-eyes",
        "ttl",
        "justification",
        "respondable",
        "group set",
        "group delete",
        "access allow",
        "access revoke",
        "dm",
        "mcp reload",
    }
)
EVERYONE = "everyone"
DEFAULT_USAGE_DAYS, MAX_USAGE_DAYS = 7, 366
_CHANNEL = re.compile(r"^(?:<#([A-Za-z0-9_.:@-]+)(?:\|[^>]*)?>|#([A-Za-z0-9_.:@-]+))$")
_SLACK_USERGROUP = re.compile(r"^<!subteam\^([A-Za-z0-9]+)(?:\|@?([^>]*))?>$")
_GROUP_NAME = re.compile(r"^@?([A-Za-z0-9][A-Za-z0-9_.-]{0,63})$")
_USER = re.compile(r"^(?:<@([A-Za-z0-9_.:@-]+)(?:\|[^>]*)?>|@?([A-Za-z0-9_.:@-]+))$")
_MEMORY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class AdminCommand:
    """A parsed command: ``name`` (e.g. ``"policy set"``), the tool key, the channel and the value."""

    name: str
    tool_key: str | None = None
    channel: str | None = None
    value: Any = None
    condition: Condition | None = None
    """``policy set|reset … when …``: the condition on the call's arguments."""
    breakglass: int | None = None
    """``policy set … breakglass after <duration>|off``: the break-glass delay in seconds (0: off; issue 31)."""

    @property
    def is_change(self) -> bool:
        """Whether the command changes policy (admins only)."""
        return self.name in CHANGES


def is_admin_command(text: str) -> bool:
    """Whether ``text`` starts with an admin command word (Teams routes such messages here)."""
    words = text.strip().split(maxsplit=1)
    return bool(words) and words[0].lower().lstrip("/") in COMMAND_WORDS


def parse_duration(text: str) -> int:
    """:func:`duration_seconds` for admin commands: :class:`CommandError` with the reason (and usage for bad syntax)."""
    try:
        return duration_seconds(text)
    except DurationError as exc:
        if DURATION_SYNTAX.match(text.strip().lower()):
            raise CommandError(f"{exc}.") from None
        raise _usage(str(exc)) from None


def parse_command(text: str) -> AdminCommand:
    """Parse one command line; :class:`CommandError` (with usage help) for bad syntax."""
    try:
        words = shlex.split(text.strip())
    except ValueError:
        words = text.strip().split()
    if not words:
        return AdminCommand("help")
    head = words[0].lower().lstrip("/")
    parse = _COMMANDS.get(head)
    if parse is None:
        raise _usage(f"I don't understand '{text.strip()[:80]}'")  # not a command: all of them
    try:
        command = parse(words[1:])
    except CommandError as exc:
        message = str(exc)
        if not message.endswith(USAGE):
            raise
        raise CommandError(f"{message[: -len(USAGE)].rstrip()}\n{usage_of(head, words[1:])}") from None
    if command is None:
        raise CommandError(f"I don't understand '{text.strip()[:80]}'.\n{usage_of(head, words[1:])}")
    return command


def usage_of(head: str, args: list[str]) -> str:
    """The usage lines of one command (``policy set`` when that is what was typed, else every ``policy`` form)."""
    entries: list[list[str]] = []
    for line in USAGE.splitlines():
        if line.startswith("  ") and not line.startswith("   ") and line.strip():
            entries.append([line.strip()])
        elif line.startswith("   ") and entries:
            entries[-1].append(line.strip())
    own = [e for e in entries if e[0] == head or e[0].startswith(f"{head} ")]
    if args:
        narrower = [e for e in own if e[0].startswith(f"{head} {args[0].lower()}")]
        own = narrower or own
    forms = [re.split(r"\s{2,}", e[0])[0] for e in own]
    return "usage: " + " | ".join(forms) + " (help lists every command)"


def _help_command(args: list[str]) -> AdminCommand | None:
    return AdminCommand("help")


def _mcp_command(args: list[str]) -> AdminCommand | None:
    """``mcp list`` | ``mcp reload``."""
    if len(args) == 1 and args[0].lower() in ("list", "reload"):
        return AdminCommand(f"mcp {args[0].lower()}")
    return None


def _pending_command(args: list[str]) -> AdminCommand | None:
    return AdminCommand("pending") if not args else None


def _audit_command(args: list[str]) -> AdminCommand | None:
    """``audit [count]``."""
    if len(args) > 1:
        return None
    count = 10
    if args:
        if not args[0].isdigit() or not 1 <= int(args[0]) <= 200:
            raise _usage("audit takes a number between 1 and 200")
        count = int(args[0])
    return AdminCommand("audit", value=count)


def _usage_command(args: list[str]) -> AdminCommand | None:
    """``usage [#channel] [days]``."""
    if len(args) > 2:
        return None
    channel = _channel(args.pop(0)) if args and args[0].startswith(("#", "<#")) else None
    days = DEFAULT_USAGE_DAYS
    if args:
        if not args[0].isdigit() or not 1 <= int(args[0]) <= MAX_USAGE_DAYS:
            raise _usage(f"usage takes a number of days between 1 and {MAX_USAGE_DAYS}")
        days = int(args[0])
    return AdminCommand("usage", channel=channel, value=days)


def _policy_command(args: list[str]) -> AdminCommand | None:
    """``policy list [#channel]``, ``policy set <tool> <mode> [#channel] [when ...]``, ``policy reset ...``."""
    if not args:
        return None
    sub = args[0].lower()
    args, glass = _split_breakglass(args)
    if glass is not None and sub != "set":
        raise _usage("breakglass goes with policy set")
    rest, condition = _split_when(args[1:])
    if sub == "list" and len(rest) <= 1:
        return AdminCommand("policy list", channel=_channel(rest[0]) if rest else None)
    if sub == "set" and len(rest) in (2, 3):
        mode = rest[1].lower()
        if mode not in MODES:
            raise _usage(f"mode must be one of {', '.join(MODES)}")
        return AdminCommand(
            "policy set",
            tool_key=rest[0],
            value=mode,
            channel=_channel_opt(rest[2:]),
            condition=condition,
            breakglass=glass,
        )
    if sub == "reset" and len(rest) in (1, 2):
        return AdminCommand("policy reset", tool_key=rest[0], channel=_channel_opt(rest[1:]), condition=condition)
    return None


def _split_breakglass(words: list[str]) -> tuple[list[str], int | None]:
    """The words without ``breakglass after <duration>`` or ``breakglass off``, and that delay (0: off)."""
    lowered = [w.lower() for w in words]
    if "breakglass" not in lowered:
        return words, None
    at = lowered.index("breakglass")
    if lowered[at + 1 : at + 2] == ["off"]:
        return words[:at] + words[at + 2 :], 0
    if lowered[at + 1 : at + 2] == ["after"] and len(words) > at + 2:
        seconds = parse_duration(words[at + 2])
        if seconds < 1:
            raise _usage("breakglass after takes a duration of at least 1s")
        return words[:at] + words[at + 3 :], seconds
    raise _usage("write breakglass after <duration> (e.g. 5m) or breakglass off")


def _breakglass_command(args: list[str]) -> AdminCommand | None:
    """``breakglass list``, ``breakglass review <id> ok|not-ok [note]`` (issue 31: bot.engine.breakglass)."""
    if len(args) == 1 and args[0].lower() == "list":
        return AdminCommand("breakglass list")
    if len(args) >= 3 and args[0].lower() == "review" and args[2].lower() in ("ok", "not-ok"):
        if not _MEMORY_ID.match(args[1]):
            raise _usage(f"'{args[1][:64]}' is not a break-glass id (breakglass list shows them)")
        return AdminCommand("breakglass review", value=(args[1], args[2].lower(), " ".join(args[3:]) or None))
    if len(args) >= 3 and args[0].lower() == "run":
        if not _MEMORY_ID.match(args[1]):
            raise _usage(f"'{args[1][:64]}' is not an approval id")
        return AdminCommand("breakglass run", value=(args[1], " ".join(args[2:])))
    return None


def _memory_words(args: list[str]) -> AdminCommand | None:
    return _memory_command(args[0].lower(), args[1:]) if args else None


def _approvers_command(args: list[str]) -> AdminCommand | None:
    """``approvers <tool> none|<entry>... [when tainted]``."""
    args, tainted = _split_tainted(args, "approvers")
    if len(args) < 2:
        return None
    if len(args) == 2 and args[1].lower() == "none":
        return AdminCommand("approvers", tool_key=args[0], value=(), condition=tainted)
    return AdminCommand("approvers", tool_key=args[0], value=tuple(_approver(a) for a in args[1:]), condition=tainted)


def _split_tainted(args: list[str], name: str) -> tuple[list[str], Condition | None]:
    """The words without a trailing ``when tainted``, and that condition (issue 31: ``bot.engine.tainted_rules``);
    any other condition is refused (these rules are per tool, not per argument)."""
    lowered = [w.lower() for w in args]
    if "when" not in lowered:
        return args, None
    at = lowered.index("when")
    if lowered[at + 1 :] != [TAINTED]:
        raise _usage(f"{name} takes only 'when tainted' as a condition")
    return args[:at], parse_condition(TAINTED)


def _group_command(args: list[str]) -> AdminCommand | None:
    """``group list``, ``group delete <name>``, ``group set <name> <entry>...``."""
    if not args:
        return None
    sub, rest = args[0].lower(), args[1:]
    if sub == "list" and not rest:
        return AdminCommand("group list")
    if sub == "delete" and len(rest) == 1:
        return AdminCommand("group delete", value=_group_name(rest[0]))
    if sub == "set" and len(rest) >= 2:
        return AdminCommand("group set", value=(_group_name(rest[0]), tuple(_approver(a) for a in rest[1:])))
    return None


def _access_command(args: list[str]) -> AdminCommand | None:
    """``access list``, ``access allow|revoke <#channel|*> <who|everyone>``."""
    if not args:
        return None
    sub, rest = args[0].lower(), args[1:]
    if sub == "list" and not rest:
        return AdminCommand("access list")
    if sub in ("allow", "revoke") and len(rest) == 2:
        where = None if rest[0] == "*" else _channel(rest[0])
        who = EVERYONE if rest[1].lower() in (EVERYONE, "@everyone") else _approver(rest[1])
        return AdminCommand(f"access {sub}", channel=where, value=who)
    return None


def _dm_command(args: list[str]) -> AdminCommand | None:
    if len(args) == 1 and args[0].lower() in ("on", "off"):
        return AdminCommand("dm", value=args[0].lower() == "on")
    return None


def _quorum_command(args: list[str]) -> AdminCommand | None:
    if len(args) != 2:
        return None
    if not args[1].isdigit() or not 1 <= int(args[1]) <= 10:
        raise _usage("quorum is a number between 1 and 10")
    return AdminCommand("quorum", tool_key=args[0], value=int(args[1]))


def _four_eyes_command(args: list[str]) -> AdminCommand | None:
    """``four-eyes <tool> on|off [when tainted]``."""
    args, tainted = _split_tainted(args, "four-eyes")
    if len(args) == 2 and args[1].lower() in ("on", "off"):
        return AdminCommand("four-eyes", tool_key=args[0], value=args[1].lower() == "on", condition=tainted)
    return None


def _ttl_command(args: list[str]) -> AdminCommand | None:
    return AdminCommand("ttl", tool_key=args[0], value=parse_duration(args[1])) if len(args) == 2 else None


def _justification_command(args: list[str]) -> AdminCommand | None:
    """``justification <tool> required|off``, ``justification list`` (issue 31: bot.engine.justification)."""
    if len(args) == 1 and args[0].lower() == "list":
        return AdminCommand("justification list")
    if len(args) == 2 and args[1].lower() in ("required", "off"):
        return AdminCommand("justification", tool_key=args[0], value=args[1].lower() == "required")
    return None


def _respondable_command(args: list[str]) -> AdminCommand | None:
    """``respondable <tool> on|off`` (issue 30: bot.engine.responding; not ``respond``, which starts sentences)."""
    if len(args) == 2 and args[1].lower() in ("on", "off"):
        return AdminCommand("respondable", tool_key=args[0], value=args[1].lower() == "on")
    return None


_COMMANDS: dict[str, Callable[[list[str]], AdminCommand | None]] = {
    "help": _help_command,
    "pending": _pending_command,
    "mcp": _mcp_command,
    "audit": _audit_command,
    "usage": _usage_command,
    "policy": _policy_command,
    "memory": _memory_words,
    "approvers": _approvers_command,
    "group": _group_command,
    "access": _access_command,
    "dm": _dm_command,
    "quorum": _quorum_command,
    "four-eyes": _four_eyes_command,
    "ttl": _ttl_command,
    "justification": _justification_command,
    "respondable": _respondable_command,
    "breakglass": _breakglass_command,
}
"""Each command word's parser: the command, or ``None`` when its words do not fit (the usage help then)."""


def _memory_command(sub: str, rest: list[str]) -> AdminCommand:
    """``memory list [#channel]``, ``memory forget <id>``, ``memory clear me|#channel``."""
    if sub == "list" and len(rest) <= 1:
        return AdminCommand("memory list", channel=_channel(rest[0]) if rest else None)
    if sub == "forget" and len(rest) == 1:
        if not _MEMORY_ID.match(rest[0]):
            raise _usage(f"'{rest[0][:64]}' is not a memory id (memory list shows them)")
        return AdminCommand("memory forget", value=rest[0])
    if sub == "clear" and len(rest) == 1:
        if rest[0].lower() == "me":
            return AdminCommand("memory clear", value="me")
        return AdminCommand("memory clear", channel=_channel(rest[0]))
    raise _usage(f"I don't understand 'memory {' '.join([sub, *rest])[:80]}'")


def _split_when(words: list[str]) -> tuple[list[str], Condition | None]:
    """The words before ``when``, and the condition after it (``None`` without ``when``)."""
    lowered = [w.lower() for w in words]
    if "when" not in lowered:
        return words, None
    at = lowered.index("when")
    before, after = words[:at], words[at + 1 :]
    if after and _CHANNEL.match(after[-1]):  # "… when env=prod #ops": the channel may come last
        before, after = [*before, after[-1]], after[:-1]
    return before, parse_condition(" ".join(after))


def _usage(problem: str) -> CommandError:
    return CommandError(f"{problem}.\n\n{USAGE}")


def _channel(word: str) -> str:
    match = _CHANNEL.match(word)
    if not match:
        raise _usage(f"'{word}' is not a channel; write it as #channel")
    return match.group(1) or match.group(2)


def _channel_opt(words: list[str]) -> str | None:
    return _channel(words[0]) if words else None


def _user(word: str) -> str:
    match = _USER.match(word)
    if not match:
        raise _usage(f"'{word}' is not a user; write it as @user")
    return match.group(1) or match.group(2)


def _group_name(word: str) -> str:
    match = _GROUP_NAME.match(word)
    if not match:
        raise _usage(f"'{word[:64]}' is not a group name; use letters, digits, '-', '_' or '.'")
    return match.group(1).lower()


def _approver(word: str) -> str:
    """An approver word: a Slack user group → its entry; ``<@U…>`` → the id; ``@name`` → ``@name`` (a named
    group if one exists, else a person's id: :class:`~bot.engine.admin_commands.AdminCommands` decides)."""
    match = _SLACK_USERGROUP.match(word)
    if match:
        return platform_group(match.group(1), match.group(2) or None)
    if word.startswith("<@"):
        return _user(word)
    return "@" + _user(word)


def format_rule(tool_key: str, scope: str, fields: dict[str, Any], *, where: str | None = None) -> str:
    """One line describing a rule, e.g. ``delete_file @ channel:slack:T1:C1: mode=always, quorum=2``.

    ``where``: the place as people know it (``#ops``, ``this chat``), said instead of the scope:
    ``delete_file in #ops: mode=always``.
    """
    shown = []
    for name in ("mode", "approvers", "quorum", "four_eyes", "ttl_seconds"):
        value = fields.get(name)
        if value is None:
            continue
        if name == "approvers":
            value = ", ".join(group_label(a) for a in value) if value else "requester and admins"
        if name == "four_eyes":
            value = "on" if value else "off"
        if name == "ttl_seconds":
            name, value = "ttl", format_duration(int(value))
        shown.append(f"{name}={value}")
    place = f"in {where}" if where is not None else f"@ {scope}"
    return f"{tool_key} {place}: {', '.join(shown) or '(inherits everything)'}"
