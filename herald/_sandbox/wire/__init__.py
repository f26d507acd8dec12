"""The contract of every process seam: framing, every frame as a type, one guard per channel, the grant's types."""
