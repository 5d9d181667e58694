"""Attacks and bad input, end to end through the real engine and CLI."""
