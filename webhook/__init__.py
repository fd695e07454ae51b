"""Tether webhook."""
