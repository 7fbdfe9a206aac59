"""Volumes at the gateway (docs/volumes.md): E2B's Volume API (records and names kept in etcd,
data in snapstore's VolumeService), the `/volumecontent` proxy, the mounts a create or fork
gives a sandbox, and the sweep of copy-on-write clones whose sandbox is gone."""
