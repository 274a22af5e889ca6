"""One model call's path through the proxy, in one direction: admission -> prepare (splice) -> run (the engine)
-> record. ``CallPath`` owns it; every dialect's route hands it a parsed request."""

from rollwire.proxy.call.base import Call, RequestBody
from rollwire.proxy.call.path import CallPath

__all__ = ["Call", "CallPath", "RequestBody"]
