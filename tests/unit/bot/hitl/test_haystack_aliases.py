"""The table that maps Haystack's human-in-the-loop class names to ours covers exactly what bot.hitl exports."""

from __future__ import annotations

import bot.hitl
from bot.hitl.serialization import HITL_CLASS_MODULES, haystack_alias


def test_every_class_bot_hitl_exports_is_in_the_haystack_alias_table_with_its_module() -> None:
    exported = {name: obj.__module__ for name, obj in vars(bot.hitl).items() if isinstance(obj, type)}
    assert exported == HITL_CLASS_MODULES


def test_a_haystack_path_of_a_class_we_do_not_mirror_is_left_as_it_is() -> None:
    path = "haystack.human_in_the_loop.strategies.SomethingElse"
    assert haystack_alias(path) == path
