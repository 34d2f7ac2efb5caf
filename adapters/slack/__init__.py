"""The Slack adapter: Bolt's AsyncApp on aiohttp (or Socket Mode) in front of the engine.

``plugin`` serves it, ``app`` translates Slack requests into engine calls, ``surface`` speaks through
the Web API, ``blocks`` renders Block Kit and ``mrkdwn`` makes untrusted text inert.
"""
