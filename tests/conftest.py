"""Shared pytest fixtures for the countersign test suite."""

from __future__ import annotations
