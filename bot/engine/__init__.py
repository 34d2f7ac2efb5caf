"""countersign: the engine, what turns chat events into agent runs, approvals and answers.

A regular package (not a namespace one), so that import-linter and grimp see its modules and can hold
its layers.
"""
