"""Stand-in for the Compass Director (GraphQL), for tests and the local demo."""
