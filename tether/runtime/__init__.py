"""The elected runtime and the clients above it: leader election, the scheduler of a
leader-elected part, its run metrics, the sender to the listener, the consumer library (a
Watch's records as a stream of changes, docs/consumers.md). Imports the floors below; not
``tether.http``."""
