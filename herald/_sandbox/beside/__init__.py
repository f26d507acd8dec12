"""Tool calls answered beside the script (in its own process, or by a backend's supervisor): the grant as taken, the one call counter, answer_call."""
