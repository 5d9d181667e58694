"""Probe kit and host-side judges for tiers C0-C5."""
