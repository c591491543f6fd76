"""Benchmarks for node-requests-agent, run by ``python bench/run.py NAME...`` (docs/benchmarks.md).

One module per benchmark (``throughput``, ``stream``, ``list_decode``, ``memory``, ``churn``, ``idle``, ``versus``,
``export``, ``startup``; ``cluster_scale/`` for the control-plane one), the pieces they share in ``common``,
``measure`` and ``floor_program``, and in ``baselines/`` the stand-alone programs the agent is measured against,
run by the production venv's interpreter.
"""
