"""Stand-in for torch._dynamo (the examples read its counters)."""
