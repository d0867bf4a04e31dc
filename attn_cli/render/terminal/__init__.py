"""The terminal: rich tables of a trace (tables), of the heads census (heads) and of a
comparison (compare), drawn fast (fasttable) and cut to the terminal's width (fit)."""
