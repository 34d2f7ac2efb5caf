"""Microsoft Teams adapter: the Microsoft 365 Agents SDK's CloudAdapter behind ``POST /api/messages``.

It only translates (activities → engine calls) and renders (Adaptive Cards, Markdown-safe text);
every rule lives in :mod:`bot.engine`. The server plugin is :class:`adapters.teams.plugin.TeamsPlugin`.
"""
