"""Framed JSON RPC between the parent dispatcher and sandbox children."""
