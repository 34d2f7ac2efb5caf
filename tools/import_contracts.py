"""An import-linter contract that forbids every import cycle between modules: ``acyclic_modules``.

import-linter's own ``acyclic_siblings`` compares sibling packages, so it misses a module that imports its
own package (``bot.hitl.serialization`` importing ``bot.hitl``, whose ``__init__`` imports it back). This
contract finds the strongly connected components of the module graph itself: any cycle, however it runs.
Registered in pyproject.toml (``contract_types``); ``lint-imports`` finds it because it runs from the root.
"""

from __future__ import annotations

from collections.abc import Iterable

from grimp import ImportGraph
from importlinter.application import contract_utils, output
from importlinter.application.contract_utils import AlertLevel
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


class AcyclicModulesContract(Contract):
    """No module of ``packages`` reaches itself through imports (cycles only inside ``skip`` are left alone)."""

    type_name = "acyclic_modules"

    packages = fields.ListField(subfield=fields.StringField())
    skip = fields.ListField(subfield=fields.StringField(), required=False)
    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)
    unmatched_ignore_imports_alerting = fields.EnumField(AlertLevel, default=AlertLevel.ERROR)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        removal = contract_utils.remove_ignored_imports_and_report(
            graph=graph,
            # Contract fields hold their parsed values on the instance; their class-level types say Field.
            ignore_imports=self.ignore_imports,  # type: ignore[arg-type]
            unmatched_alerting=self.unmatched_ignore_imports_alerting,  # type: ignore[arg-type]
        )
        roots: list[str] = list(self.packages)  # type: ignore[arg-type]
        skipped: list[str] = list(self.skip or [])  # type: ignore[arg-type]
        modules = {m for m in graph.modules if _within(m, roots)}
        cycles = [c for c in strongly_connected(graph, modules) if not all(_within(m, skipped) for m in c)]
        return ContractCheck(
            kept=not cycles,
            warnings=list(removal.warnings),
            ignored_import_count=removal.ignored_import_count,
            metadata={"cycles": cycles},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(f"An import cycle of {len(cycle)} modules: {', '.join(cycle)}")
            output.new_line()


def _within(module: str, packages: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def strongly_connected(graph: ImportGraph, modules: set[str]) -> list[list[str]]:
    """The components of more than one module in which every module imports every other, directly or not.

    Tarjan's algorithm, iterative (a deep import chain must not hit Python's recursion limit).
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start) & modules)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(components)
