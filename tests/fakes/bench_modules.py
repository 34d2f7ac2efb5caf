"""The benchmark scripts under ``bench/`` as modules, for tests that count what a bench counts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def engine_bench() -> ModuleType:
    """``bench/engine.py`` (its ``run_conversations`` and ``StorageProfile``), loaded once per test session."""
    name = "countersign_engine_bench"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH / "engine.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
