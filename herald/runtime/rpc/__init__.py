"""The parent's side of the framed JSON RPC with sandbox children (the frames and the child's
client are part of the sandbox package, herald/_sandbox)."""
