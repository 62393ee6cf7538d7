"""Extractors: turn one episode (plus recent context) into entities and facts."""
