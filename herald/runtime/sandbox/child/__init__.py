"""Files that run inside the sandbox child (stdlib only, Python >= 3.8).

They are copied, with the RPC client and protocol, into the sandbox directory as the private
package `_hermes_runtime`; Herald itself is never importable from the child.
"""
