"""countersign: bot."""
