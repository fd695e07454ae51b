"""Tether poller."""
