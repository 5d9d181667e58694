"""The version of the scoring rules.

Every scoring of a run records the rules version that judged it, so a run scored before a rules change
stays comparable: ``resenv rescore`` re-judges its kept post-agent states under the current version
into a new scoring beside the old one. Bump the version whenever a change can alter a tier's status,
category or hallucination count for the same post-agent state.
"""

RULES_VERSION = "2026.12.2"
"""Date-stamped: the month the rules last changed their verdicts, and which change of that month
(2026.12.2: an offline agent's missing package is `offline_miss`, no longer `download_failed`)."""
