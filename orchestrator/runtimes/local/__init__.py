"""The local runtime (the embedded default): one sandboxed process per rollout on this machine (``runtime``), its
sandbox's parts (``sandboxed``, the endpoint ``relay``) and the warm pool of ready sandboxes (``sandbox_pool``,
``warm_pool``, the ``fork_server`` inside each)."""
