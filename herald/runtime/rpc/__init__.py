"""The parent's side of the framed JSON RPC with sandbox children (the frames and the child's
client are part of the sandbox package, herald/_sandbox): server.py (the socket, its connections),
replies.py (a call frame made a ToolCall for the Dispatcher, its outcome the reply frame),
charges.py (large frames counted against the run's cap), workers.py (the connections' threads)."""
