"""The Linen ``Module`` machinery, one file per concern in a one-way import chain.

``adapters.linen.module`` and ``adapters.linen.summary`` are the public faces; README.md
here lists the files from the bottom up and what each may import.
"""
