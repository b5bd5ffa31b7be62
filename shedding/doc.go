// Package shedding is the admission and retry policy every Willow service
// shares, as gRPC interceptors: a node runs admission (Shedder.GateCall)
// inside its own server interceptor when node.Config.Shed is set; other
// servers install UnaryServerInterceptor and StreamServerInterceptor.
//
// A request carries its context in gRPC metadata: willow-business and
// willow-user (WithRequest on the client; the client interceptors carry an
// incoming request's context on to the calls made while serving it).
// Business priority comes from Config.Priorities (1 = highest; unknown or
// missing businesses rank below all). User priority (0..127) is SipHash-2-4
// keyed with Config.UserKey of (user ID, hour number): one user's requests,
// and so one user's whole upload chain, share one fate within an hour, and
// the unlucky users change every hour.
//
// Each non-exempt request goes through, in order:
//
//  1. Coarse shedding: the knob shed_ratio.BUSINESS = r rejects the users of
//     that business whose keyed hash falls in the top r of its range (the
//     lowest user priorities), deterministically: a user is never half
//     served. Reason shed_ratio, retry-after RetryAfterShedRatio.
//  2. Adaptive admission (DAGOR): the compound key (business priority-1)*128
//     + user priority is admitted when it is at most the current level.
//     Every window (Config.Window or DefaultWindowRequests requests) the
//     mean time requests waited for a concurrency slot is compared with
//     Config.QueueThreshold: when over, the level drops to the highest one
//     keeping at most 95% of the window's admitted requests (by the
//     window's histogram of requests by key); when not, it rises to admit
//     about 1% more (to all levels when nobody asked for more). Reason
//     overload, retry-after RetryAfterOverload.
//  3. A concurrency slot (Config.MaxInFlight), waited for in priority order;
//     the wait is the queueing time; after Config.MaxWait the request is
//     rejected with reason overload.
//
// Each method has a Class. Services declare their methods' classes next
// to their code (upload.ShedClasses, timeline.ShedClasses) and hand them
// to their node's Shedder (Declare); shedding names no service's methods.
// Exempt methods skip all three (never shed mid-upload: Chunks, Commit and
// Status of an upload admitted at Begin; health); they take no slot, so
// their load is not in the queueing signal. Deferred methods (the upload
// front's Begin) always reach their handler, which reads WouldShed to
// learn the decision and may spill to a buffer pool instead of failing.
//
// The current level goes back in the response header willow-admit-level
// (not for exempt or deferred methods) while it is below the top and for
// DefaultLevelTTL after it returns there; a client hearing no level drops
// nothing. The client interceptors remember
// it per callee address and method for DefaultLevelTTL and fail locally,
// with the same overload error, a request the callee would reject.
// RetryBudget caps a client's retries at a ratio (10%) of its requests over
// a sliding window; the SDK rejects a retry over budget with reason
// retry_budget.
//
// Guarantees: one admission decision takes no lock and allocates nothing
// (Admit); time and randomness are injected (Deps.Now, Deps.Rand); knobs
// are re-read at most every KnobRefresh; metrics go to Deps.Registerer
// only, so several Shedders can live in one process on separate
// registries.
package shedding
