"""wow-py benchmarks (not tests): python -m benchmarks.<name>."""
