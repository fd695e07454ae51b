"""The wire contract: change records and their schemas, state hashes, the listener's API paths,
delivery summaries, Watches and the filters they select with. Imports ``tether.kube`` and
``tether.base`` only."""
