"""The snapstore's Prometheus metrics: chunk bytes stored and served (compressed, as kept), the
chunks a push did not send because they were stored already, and what collection removes."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

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
