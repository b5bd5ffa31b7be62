// Package buffer is Willow's TSSD-style buffer pool: an append-only,
// checksummed blob store in one local directory, in the manner of Haystack
// volumes. The upload front keeps two of them, pool 1 (zone: uploads
// accepted while overloaded, drained slowly) and pool 2 (preupload: uploads
// the store cannot take now, served from here until migrated).
//
// # Guarantees
//
//   - An Append that returns nil is durable per the Sync policy (below) and
//     is visible to Get, Stat and List at once.
//   - A blob is never served partly or wrongly: Get verifies the blob's
//     CRC32C before it returns a reader and answers ErrCorrupt otherwise.
//   - After a crash (kill -9 at any instant, or a power loss under
//     SyncEveryAppend) Open finds every acknowledged blob and tombstone; a
//     torn record at the end of the newest segment is detected and cut off.
//   - Append is idempotent per key: appending a live key is a no-op. An
//     Append that fails (ErrSizeMismatch, a reader error, a cancelled
//     context, a disk error) leaves nothing visible.
//
// # Files
//
// The directory holds a LOCK file (flock'ed by the open Pool, so two
// processes never share a pool) and segment files named by a 20-digit,
// zero-padded, increasing id: 00000000000000000001.seg, ... Records are
// appended to the newest ("active") segment only. When a record would push
// the active segment past Options.MaxSegmentBytes it is sealed (fsynced,
// whatever the policy) and a new segment is created (and the directory
// fsynced). Replaying all segments in id order, each from offset 0, rebuilds
// the index: later records win.
//
// # Record format
//
// Every record, blob or tombstone, is a 36-byte header, then the key, then
// the meta, then the blob. Integers are little-endian.
//
//	offset size field
//	0      4    magic 0x57424631
//	4      1    version (1)
//	5      1    flags: bit 0 = tombstone (then meta and blob are empty)
//	6      2    key length (1..4096)
//	8      4    meta length (0..1 MiB)
//	12     8    blob length
//	20     8    appended at, Unix nanoseconds
//	28     4    CRC32C (Castagnoli) of the blob
//	32     4    CRC32C of header bytes 0..31, key and meta
//
// # Writing a record, and why a torn one is always caught
//
// Append writes, in order: a header of zeros (an invalid magic) with the key
// and meta; the blob, streamed from the caller while its CRC32C is computed;
// then the real header over the zeros; then fsync (SyncEveryAppend). Until
// the real header is written the record cannot parse, and once it is, the
// blob before it is complete in the page cache. Open scans each segment and
// stops at the first record that has a bad magic/version/flags/length, runs
// past the end of the file or fails its header CRC; it truncates the segment
// there. In the newest segment, the only one a crash can leave half-written,
// it also checks every blob's CRC (a power loss may persist the header page
// before blob pages): a mismatch on the last record is truncated as a torn
// tail; one on an earlier record drops that record from the index and
// counts it as corrupt. Older, sealed segments are checked at header level
// at Open (reading every blob of a large pool would make Open slow); their
// blobs are checked by every Get.
//
// A failed Append truncates the segment back to where the record started. If
// that truncate fails, or an fsync fails (after which the page cache state is
// unknown), the pool refuses further writes until it is reopened, which
// re-runs recovery.
//
// # Sync policy
//
// SyncEveryAppend (default): Append and Delete fsync the segment before they
// return; segment creation and removal fsync the directory. An acknowledged
// blob or delete survives kill -9, a kernel crash and a power loss (given a
// disk that honours flushes). Cost: one fsync per Append (see BENCHMARKS.md).
//
// SyncNone: Append and Delete return once the bytes are in the page cache.
// An acknowledged record survives kill -9 of the process (the kernel still
// holds the pages) but a power loss or kernel crash may lose the most recent
// appends and deletes — a lost delete brings a drained blob back, which the
// drainer must tolerate (drains are idempotent). Checksums still guarantee
// no partial or wrong blob is served. Segments are fsynced when sealed and
// on Close.
//
// # Deletes and compaction
//
// Delete appends a tombstone record. Compact works oldest segment first:
//
//   - A sealed segment whose live blobs fill less than half of it has them
//     copied to the active segment: the same header (AppendedAt included),
//     the blob re-verified against its CRC on the way, every destination
//     fsynced whatever the policy, then the index switched to the copies. A
//     blob that fails its CRC is not copied and its segment stays.
//   - A segment with no live blob is removed once its tombstones no longer
//     shadow a record in an older segment still on disk, and the directory
//     is fsynced after each removal.
//
// Replay lets the later copy of a key win and, like the running pool,
// remembers the older segments that still hold superseded copies: a
// tombstone for the key keeps its segment alive until all of them are gone,
// so no crash at any point of a compaction brings a deleted blob back or
// loses a live one. List stays in AppendedAt order across moves and
// restarts. Readers keep reading a removed segment through their open file
// until they Close.
//
// # Concurrency
//
// Append, Delete and Compact are serialized per pool (Append holds the lock
// while it reads its reader, so pass a local source; Compact holds it while
// it copies a segment's live blobs). Get, Stat, List and Stats run
// concurrently with them using positioned reads.
package buffer
