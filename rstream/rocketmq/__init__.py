"""rstream on Apache RocketMQ.

- ``local``: ``LocalRocketMQ``, a name server, a broker and the gRPC proxy started from pinned Maven
  Central jars on 127.0.0.1, for notebooks and tests;
- ``remoting``: the subset of RocketMQ's remoting protocol (TCP, JSON headers) rstream speaks;
- ``broker``: ``RocketMQBroker``, the ``rstream.broker.Broker`` contract on any RocketMQ 5 cluster
  (with authentication and TLS where the cluster has them);
- ``local_security``: what ``LocalRocketMQ(acl=True, tls=True)`` adds (users and ACLs, certificates);
- ``visible``: a sink's records visible on commit to every consumer (half messages decided by the decision
  log, the broker's check-back answered from it);
- ``official``: the official Apache Python client (gRPC through the proxy), as an application uses it;
- ``errors``: ``RocketMQError``, what all of them raise.
"""

from __future__ import annotations

from typing import Any

from rstream.rocketmq.errors import RocketMQError

__all__ = ["LocalRocketMQ", "RocketMQBroker", "RocketMQError"]


def __getattr__(name: str) -> Any:  # lazy: importing rstream.rocketmq starts nothing and needs no Java
    if name == "LocalRocketMQ":
        from rstream.rocketmq.local import LocalRocketMQ
        return LocalRocketMQ
    if name == "RocketMQBroker":
        from rstream.rocketmq.broker import RocketMQBroker
        return RocketMQBroker
    raise AttributeError(name)
