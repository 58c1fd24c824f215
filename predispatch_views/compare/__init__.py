"""The comparison: a case library, behavioural probes, strategies side by side, benchmarks and reports."""
