"""Tether listener."""
