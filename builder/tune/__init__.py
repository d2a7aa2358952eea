"""``builder tune``: a quick search over a model's serving knobs on the real Triton.

Modules: ``space`` (the knobs and their quick-search neighbours), ``search`` (scoring, the
winner, the hill climb), ``loadgen`` (the closed-loop gRPC load generator), ``session`` (Triton
on a private copy of the model, one reload per candidate), ``report`` (table, plot, the config
and metadata writes), ``run`` (the command's one entry point).
"""
