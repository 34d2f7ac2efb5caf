"""countersign: storage."""
