"""What a person sees of a trace, by medium: terminal/ (rich tables), picture/ (matplotlib
heatmaps, the model view), page/ (the one-file HTML page), explain/ (the step-by-step
walk-through); commands.py writes the command line that reproduces a trace. Renderers read
a ``Trace`` and return renderables, figures or text; the command prints once."""
