"""The chat-ops engine: a façade (:mod:`bot.engine.engine`) over parts built bottom-up (:mod:`bot.engine.parts`)."""
