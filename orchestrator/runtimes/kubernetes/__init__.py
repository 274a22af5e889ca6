"""The Kubernetes runtime: one pod per rollout (``runtime``), built by ``pod_spec``, through the API client
(``api``), with its pool of warm pods (``pool``, ``warm_pod``)."""
