"""KLineage: verified GPU-kernel optimization skills, learned by walking expert Triton kernels backward.

Subpackages, floor by floor (imports only point down):

* ``schema`` — records, graph spec, manifest and lineage-document formats (stdlib only).
* ``kb``, ``transforms``, ``validator`` — knowledge base, source rewriting, gates.
* ``ingest``, ``graphql``, ``agent`` — walker and extraction, the API, the optimizer.
* ``cli`` — the ``klineage`` command.
"""

__version__ = "0.1.0"
