"""The listener's janitor (``tether janitor``): ``sweep`` prunes tombstones and removes what
orphaned runtimes left behind; ``main`` runs it, leader-elected, on a schedule."""
