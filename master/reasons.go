package master

// Reasons of the master's errors (the gRPC ErrorInfo reason; the console
// sends the same in its JSON "reason"), besides package auth's, flex's
// validation reasons (flex.ReasonUnknownKnob...), redisconn.ReasonRedis
// (UNAVAILABLE) and rpcstatus.ReasonDeadline and ReasonBadRequest.
const (
	// ReasonReadOnly: this master has no operator identity that may change
	// anything (PERMISSION_DENIED).
	ReasonReadOnly = "read_only"
	// ReasonNodeIDTaken: a Register or Heartbeat for a node ID that a live
	// node registered with another credential (another certificate, or
	// another process's instance key) (PERMISSION_DENIED).
	ReasonNodeIDTaken = "node_id_taken"
	// ReasonTokenInURL: the console was sent a token in its URL
	// (INVALID_ARGUMENT).
	ReasonTokenInURL = "token_in_url"
)

// Reasons of a refused flex change (INVALID_ARGUMENT unless noted).
const (
	// ReasonMissingReason: a flex change or rollback without a reason.
	ReasonMissingReason = "missing_reason"
	// ReasonEmptyChange: a flex change with neither a level nor knobs.
	ReasonEmptyChange = "empty_change"
	// ReasonInvalidExpiry: an expiry in the past or unparsable.
	ReasonInvalidExpiry = "invalid_expiry"
	// ReasonVersionConflict: the change expected another flex version
	// (ABORTED).
	ReasonVersionConflict = "version_conflict"
	// ReasonNoPrevious: a rollback with no previous version
	// (FAILED_PRECONDITION).
	ReasonNoPrevious = "no_previous"
)

// Reasons of a refused registration or heartbeat, route or drill: the name
// of the field at fault (INVALID_ARGUMENT unless noted).
const (
	// ReasonNode: node info missing, or (NOT_FOUND) no such node, or a
	// drill of a master.
	ReasonNode = "node"
	// ReasonNodeID: a node ID not of [a-z0-9-].
	ReasonNodeID = "node_id"
	// ReasonRole: role missing.
	ReasonRole = "role"
	// ReasonRegion: region missing.
	ReasonRegion = "region"
	// ReasonAddr: address missing or unspecified.
	ReasonAddr = "addr"
	// ReasonMaxPerList: a Route max_per_list below 0 or above
	// MaxRoutePerList.
	ReasonMaxPerList = "max_per_list"
	// ReasonNoHealthyNodes: no healthy node of the role in any region
	// (UNAVAILABLE).
	ReasonNoHealthyNodes = "no_healthy_nodes"
	// ReasonDrillFor: a drill duration outside 0..Config.MaxDrill.
	ReasonDrillFor = "for"
	// ReasonDrillLatency: a latency drill without latency.
	ReasonDrillLatency = "latency"
	// ReasonDrillErrorRatio: an errors drill with a ratio outside (0, 1].
	ReasonDrillErrorRatio = "error_ratio"
	// ReasonDrillKind: an unknown drill kind.
	ReasonDrillKind = "kind"
)

// Ejection reasons (the prefix of NodeStatus.reason).
const (
	ReasonMissedHeartbeats = "missed_heartbeats"
	ReasonSuccessRate      = "success_rate"
	ReasonProbeFailed      = "probe_failed"
)

// Reasons of auto-flex and scheduled changes.
const (
	// ReasonUnknownMode: an auto-flex mode other than on, off or dry-run
	// (INVALID_ARGUMENT).
	ReasonUnknownMode = "unknown_mode"
	// ReasonNoPolicy: auto-flex switched on without a valid policy
	// (FAILED_PRECONDITION).
	ReasonNoPolicy = "no_policy"
	// ReasonInvalidTime: a scheduled time in the past or too far ahead
	// (INVALID_ARGUMENT).
	ReasonInvalidTime = "invalid_time"
	// ReasonTooManySchedules: the pending schedule list is full
	// (FAILED_PRECONDITION).
	ReasonTooManySchedules = "too_many_schedules"
	// ReasonNotPending: cancel of a scheduled change already applied or
	// cancelled (FAILED_PRECONDITION).
	ReasonNotPending = "not_pending"
	// ReasonUnknownSchedule: no scheduled change of that ID (NOT_FOUND).
	ReasonUnknownSchedule = "unknown_schedule"
)
