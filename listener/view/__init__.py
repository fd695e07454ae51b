"""The listener pod's view of the KCP: one process per pod, fed by watches, shared by the
gunicorn workers over a Unix socket (docs/listener.md, "The pod's view").

``store`` (the bounded in-memory objects), ``watcher`` (list, then watch, relist after 410),
``serve`` (the socket's server and the heartbeat writes), ``client`` (the workers' side, with
fallback to direct reads), ``process`` (the process and its supervision by the master).
"""
