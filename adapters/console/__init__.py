"""The terminal surface: ``countersign chat`` over the engine, rendered with rich.

- :mod:`adapters.console.surface`: :class:`ConsoleSurface`, the engine's output in the terminal.
- :mod:`adapters.console.reader`: reading a line without blocking the event loop.
- :mod:`adapters.console.dialog`: asking the person about each pending call (y / n / m).
- :mod:`adapters.console.chat`: :func:`run_chat`, the chat loop (entry point ``countersign.console:chat``).
"""
