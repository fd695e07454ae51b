"""Stand-ins for external systems, for tests and the local demo only (not product code)."""
