// Package upload is Willow's upload front (DESIGN.md section 2): chunked,
// resumable, idempotent uploads whose raw bytes are durable before they are
// acknowledged, spilled into the buffer pools when the back end cannot take
// them, and compressed from a durable journal until done.
//
// # Protocol
//
// Begin(upload_id, token, business, user, kind, size, sha256) checks the
// HMAC upload token (UNAUTHENTICATED token_expired / token_invalid; the
// token's user and business must be the request's), the business
// (INVALID_ARGUMENT unknown_business) and the size limit (too_large). It
// returns the durable offset to resume from, or committed=true with the
// media ID when the upload was committed before. An upload is the pair
// (user, upload_id): media.KeyFor(user, upload_id) is its key, so the same
// pair always yields the same media ID and never two media.
//
// Chunks is a client stream of {upload_id, offset, data <= 1 MiB, user}.
// Chunks must arrive in order: a chunk starting beyond the bytes received
// gets INVALID_ARGUMENT chunk_out_of_order (the front does not buffer
// gaps; the client resends from Status). A chunk overlapping received
// bytes is accepted when the overlap is identical (duplicates are
// idempotent) and refused with chunk_mismatch otherwise; chunks after
// commit get FAILED_PRECONDITION already_committed. The staging file is
// fsynced every Config.SyncEvery bytes and at the end of every stream
// (also a broken one) before the durable offset is reported; that offset
// and the running SHA-256 state are kept in a checksummed two-slot offset
// file, and on restart the staging file is cut back to it.
//
// Commit verifies size and SHA-256 (INVALID_ARGUMENT size_mismatch /
// sha256_mismatch; nothing is stored, and after a SHA-256 mismatch the
// staged bytes are dropped so the client can send them again under the
// same ID) and an image's pixel count from its header only, never decoding
// it (pixel_bomb). It then makes the raw bytes and the JSON Record durable:
//
//   - pool 1, when admission deferred Begin and would have shed it for
//     overload (shedding.WouldShed) and the pool1 knob is auto, or
//     pool1=force (without pool 1, or for shed_ratio, Begin is rejected
//     RESOURCE_EXHAUSTED instead; a resumed upload is never shed);
//   - pool 2, when pool2=force, or pool2=auto and the node's store writes
//     exceed store_write_budget per second, or the store write fails;
//   - otherwise the store: raw at media.RawKey, record at media.RecordKey.
//
// Only then is the commit acknowledged. A journal entry is written before
// the acknowledgement too (except for pool 1, whose drain journals it), and
// a first compress attempt runs at once; its variants are in the reply when
// it succeeds within Config.CompressTimeout. The journal is a Redis sorted
// set when Deps.Redis is set (falling back to the staging dir while Redis
// fails) or one file per job in the staging dir; Run retries due jobs with
// jittered exponential backoff (RetryMin..RetryMax, at least the
// retry-after hint of an overloaded compress worker) until the variants
// exist — or until compress refuses the job with INVALID_ARGUMENT, which
// is permanent: the record moves to the dead-letter state failed with the
// reason (Commit's reply and GetMedia say so) and only RetryMedia, an
// operator's call, journals it again. Videos over their business's
// duration limit (limits.Limits, shared with compress) are refused at
// Commit with too_long, read from the container header.
//
// # Buffer pools
//
// Pool-1 media (ID p1.REGION.NODE.KEY) are not downloadable until drained:
// GetMedia and ReadPool give NOT_FOUND processing. Run drains pool 1
// continuously at pool1_drain_per_s (0 pauses it): raw to the store,
// record, journal entry, then delete from the pool.
//
// Pool-2 media (p2.…) are downloadable at once: ReadPool serves the raw and
// the variants from pool 2, which are made with compress return_data and
// appended to pool 2 (items over MaxInlineCompress wait for their drain).
// Drain(pool 2) — `willow buffer drain --pool 2` — moves raw, variants and
// record to the store and then deletes them from the pool. After a drain
// ReadPool falls back to the store, so readers keep working during and
// after it; GetMedia always looks in the store first.
//
// Every drain step is idempotent (store Puts of the same key, record
// rewrite, deletes of missing keys are no-ops) and a per-key lock orders
// drains against compress completions, so a drain repeated after a crash
// neither loses nor duplicates a media item.
//
// # Guarantees and limits
//
// An acknowledged upload survives kill -9 of the front: its raw and record
// are in the store or a pool (both fsync before returning), and its
// compress job is in the journal. A retried upload ID found committed in
// the staging dir, the store or a pool returns the same media ID with
// duplicate=true and stores nothing new. When the store is unreachable at
// Begin and the staging dir has forgotten a long-committed upload, the
// duplicate check is skipped (the store record still wins at drain time).
//
// Metrics (on the node's registry): willow_upload_uploads_total{outcome},
// willow_upload_bytes_total, willow_upload_spills_total{pool,cause},
// willow_upload_journal_depth, willow_upload_drained_total{pool},
// willow_upload_compress_total{outcome}; the pools export their own.
package upload
