"""Tether compass."""
