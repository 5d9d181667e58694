"""The read side: what a run's store says, for people and programs. Pyramids with their
denominators (`scoring`), the original scoring and every rescore (`scorings`, `scoring_diff`),
`views` (`show`), findings, the closing summary, events as readable lines, the figure and the CSV
report."""
