"""Process and settings, the bottom floor: settings and their parsers, logs and the audit log,
times, numbers, certificates and their reload, tracing, the operations surface. Imports no other
floor of ``tether``."""
