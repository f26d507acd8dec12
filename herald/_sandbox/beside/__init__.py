"""Tool calls answered beside the script: the grant as taken, the one call counter, answer_call."""
