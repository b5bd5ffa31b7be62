// Package edgecache is an edge cache (OC) node: it serves media downloads
// over plain HTTP (GET and HEAD /m/{id}/{variant}) and gRPC (EdgeCache.Get)
// from a byte-bounded in-memory S4LRU cache, an optional disk tier, the
// owner peer of the same OC, or origin.
//
// Guarantees:
//
//   - Memory use for cached bytes is bounded by Config.CapacityBytes (plus
//     a small hot cache of 1/8 of it for objects owned by peers); the disk
//     tier by Config.DiskCapacityBytes.
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
//   - Errors map to HTTP in one place (writeError) and to gRPC in one place
//     (grpcError): malformed id or variant 400 / INVALID_ARGUMENT "bad_id",
//     unknown 404 / NOT_FOUND "not_found", bad signature 403 /
//     PERMISSION_DENIED "signature_*", origin down
//     503 / UNAVAILABLE "origin".
package edgecache
