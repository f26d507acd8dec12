"""The sandbox child: stub generation, spawn, limits, kill, warm start, kernels, result."""
