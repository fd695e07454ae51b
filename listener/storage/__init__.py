"""The listener's storage: change records as ``RuntimeConfigMap`` objects in the KCP.
``rules`` decides (ordering, retention, quota: which records to write, prune, refuse; pure);
``store`` writes (the one write path), ``quota`` keeps a worker's view of each runtime's
usage, ``records`` builds the objects, ``writecache`` and ``digestcache`` remember."""
