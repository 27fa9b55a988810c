"""Pure core: node models, the reason grammar, decisions and topology rendering.

No I/O, no asyncio, no client libraries: everything here is a function of its arguments,
table-tested without services. Adapters translate the outside world into these types.
"""
