"""Where a script's tool call goes, as SelfServe.take says (child/selfserve.py) and the client
acts on it (child/client.py): answered in the script's process, sent to Herald, or sent to
Herald marked as past the run's call budget (Herald refuses it and says so). Stdlib only."""

from __future__ import annotations

HERE, HERALD, PAST_BUDGET = "here", "herald", "past budget"
