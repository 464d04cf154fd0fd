"""The peer library's ``mellea.stdlib`` import paths, mirrored: thin re-exports of our objects.

Replacing ``mellea`` by ``mellea_local`` in a script's imports is the whole port for what we
provide: ``mellea_local.stdlib.requirements``, ``.components.chat``, ``.frameworks.react``,
``.context``, ``.sampling`` and ``.session`` name the same objects as ``mellea_local`` itself
(``mellea_local.stdlib.requirements.req is mellea_local.req``). Only names we really have are
mapped; a peer name we lack is an ``ImportError`` naming it, never a look-alike.
"""
