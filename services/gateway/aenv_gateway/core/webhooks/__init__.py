"""E2B's lifecycle webhooks (`/events/webhooks`), delivered at least once (docs/webhooks.md).

A key registers webhooks (registry.py; records.py keeps them in etcd, the signature secret
sealed); one gateway of the cluster at a time, elected in etcd, delivers the events of each
webhook's key in order from its cursor (deliverer.py, one worker.py per webhook), signing each
body as E2B does (payload.py), retrying with backoff (retry.py), refusing private targets
(targets.py) and logging every delivery (delivery_log.py).
"""
