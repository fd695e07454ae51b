"""The HTTP worker, apart: the bounded threaded server, its connection ledger and fair queue,
gunicorn's logging and the multiprocess metrics folder. Imports ``tether.base`` at most; not
``tether.runtime``."""
