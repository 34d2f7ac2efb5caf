"""countersign: adapters."""
