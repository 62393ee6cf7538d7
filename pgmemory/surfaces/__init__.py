"""Surfaces: how people and programs reach pgmemory (CLI for now)."""
