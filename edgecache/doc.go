// Package edgecache is an edge cache (OC) node: it serves media downloads
// over plain HTTP (GET and HEAD /m/{id}/{variant}) and gRPC (EdgeCache.Get)
// from a byte-bounded in-memory S4LRU cache, an optional disk tier, the
// owner peer of the same OC, or origin.
//
// Guarantees:
//
//   - Memory use for cached bytes is bounded by Config.CapacityBytes (plus
//     a small hot cache of 1/8 of it for objects owned by peers); the disk
//     tier by Config.DiskCapacityBytes. Bytes being filled are bounded by
//     Config.FillBudgetBytes across all fills of the node (over it a fill
//     waits, until its deadline).
//   - Objects larger than Config.SliceBytes are filled and cached in
//     slices (slice.go): a request reads from origin or the owner only the
//     slices its range covers, and its first byte waits for one slice.
//   - The disk tier survives a restart: its index is rebuilt from the
//     files, every read is checked against the recorded SHA-256, torn or
//     corrupt entries are dropped (disk.go).
//   - Image variants stored as HEIC are served as JPEG to clients whose
//     Accept does not name image/heic or image/heif (browsers), or that
//     ask ?format=jpeg (negotiate.go); the JPEG is made once per OC by the
//     ring owner and cached as its own entry. Such responses carry
//     Vary: Accept; every response carries Last-Modified.
//   - The nodes of one OC shard objects by a consistent hash ring with
//     virtual nodes. A miss on a non-owner is fetched from the owner with
//     Get{peer: true}, so an object is read from origin once per OC while
//     the owner is up; when the owner fails, the node reads origin itself.
//   - Concurrent misses for one object on one node make one fetch
//     (golang.org/x/sync/singleflight); the fetch is detached from the
//     callers' cancellation and bounded by Config.OriginTimeout.
//   - Origin is chosen by the media ID: LOC s reads the store; p2 reads the
//     upload front's buffer pool 2 (Upload.ReadPool), falling back to the
//     store when the pool drained the item or the front is gone; p1 reads
//     the store (the item drained) or answers NOT_FOUND reason "processing".
//     Failed origin reads are retried (at most twice, on the other source)
//     only while the flex knob "retries" is on.
//   - Objects are immutable: the ETag is a strong hash of the content and
//     responses carry "Cache-Control: public, max-age=31536000, immutable"
//     ("private" instead when a signature let the download through).
//   - With Config.URLKeys set, every download, HTTP and gRPC alike, needs a
//     URL signed with one of the keys (package urlsign: HMAC-SHA256 over
//     media ID, variant, user, expiry and key ID), except media whose
//     business (read from its record, never from the request) is in
//     Config.PublicBusinesses. An OC peer's Get{peer: true} is not
//     checked again. Refusals are HTTP 403 / gRPC PERMISSION_DENIED with
//     reason signature_missing, signature_expired, signature_invalid or
//     signature_unknown_key. The signature is not part of the cache key.
//   - Content safety: the Content-Type served is the one sniffed from the
//     bytes (mediaheader.Sniff), never the stored or client-declared one;
//     anything that is not a media format is application/octet-stream
//     with Content-Disposition: attachment; every response carries
//     X-Content-Type-Options: nosniff.
//   - Downloads obey the coarse shed_ratio[business] knob, deterministic per
//     user: HTTP 429 with Retry-After, gRPC RESOURCE_EXHAUSTED "shed_ratio".
//     When the node runs the shedding policy (node.Config.Shed), HTTP asks
//     it (Shedder.Admit: shed_ratio plus priority admission, reason
//     "overload") and gRPC leaves admission to its interceptor.
//   - HTTP: plain GET/HEAD downloads (hits and whole-object misses) are
//     answered by the edge's own HTTP/1.1 hit path (hitpath.go) with
//     header bytes made once per object and one writev or a sendfile;
//     any other request hands its connection to net/http, which answers
//     it and the rest of the connection. Config.NoHitPath turns it off.
//   - Errors map to HTTP in one place (writeError) and to gRPC in one place
//     (grpcError): malformed id or variant 400 / INVALID_ARGUMENT "bad_id",
//     unknown format 400 / INVALID_ARGUMENT "bad_format",
//     unknown 404 / NOT_FOUND "not_found", a variant of a media item that
//     ended failed (its store record says so) 422 / FAILED_PRECONDITION
//     with the item's reason (e.g. "corrupt_media"), bad signature 403 /
//     PERMISSION_DENIED "signature_*", origin down
//     503 / UNAVAILABLE "origin".
package edgecache
