"""The snapstore's Prometheus metrics: chunk bytes stored and served (compressed, as kept), the
chunks a push did not send because they were stored already, and what collection removes; for
volumes: the volumes open, NFS calls by procedure, file bytes read and written (over NFS or the
content API) and how long syncs to the backend take."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CHUNKS_WRITTEN = Counter("aenv_snapstore_chunks_written", "Chunks stored")
BYTES_WRITTEN = Counter("aenv_snapstore_chunk_bytes_written",
                        "Chunk bytes stored (zstd-compressed, as kept)")
BYTES_UNCOMPRESSED_WRITTEN = Counter("aenv_snapstore_chunk_bytes_uncompressed_written",
                                     "What the stored chunks hold, uncompressed")
CHUNKS_READ = Counter("aenv_snapstore_chunks_read", "Chunks served")
BYTES_READ = Counter("aenv_snapstore_chunk_bytes_read", "Chunk bytes served (compressed)")
CHUNKS_PRESENT = Counter("aenv_snapstore_chunks_present",
                         "Chunks a push asked about that were stored already (not sent again)")
CHUNKS_MISSING = Counter("aenv_snapstore_chunks_missing",
                         "Chunks a push asked about that it had to send")
GC_DELETED_BYTES = Counter("aenv_snapstore_gc_deleted_bytes",
                           "Chunk bytes removed by garbage collection")
GC_KEPT_CHUNKS = Gauge("aenv_snapstore_gc_kept_chunks",
                       "Chunks the last garbage collection kept (what the store holds)")

# Volumes (the open volumes, connections, sync times and volume chunk bytes are read from the
# store and the NFS server at each scrape: volume_metrics.py).
NFS_OPS = Counter("aenv_snapstore_nfs_ops", "NFS and MOUNT calls answered, by procedure and status",
                  ["procedure", "status"])
NFS_SECONDS = Histogram("aenv_snapstore_nfs_seconds", "NFS and MOUNT call time, by procedure",
                        ["procedure"],
                        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                 0.5, 1, 2.5, 10))
VOLUME_BYTES_READ = Counter("aenv_snapstore_volume_bytes_read",
                            "File bytes read from volumes, by way (nfs or api)", ["via"])
VOLUME_BYTES_WRITTEN = Counter("aenv_snapstore_volume_bytes_written",
                               "File bytes written to volumes, by way (nfs or api)", ["via"])
VOLUME_GC_DELETED_BYTES = Counter("aenv_snapstore_volume_gc_deleted_bytes",
                                  "Volume chunk bytes removed by garbage collection")
