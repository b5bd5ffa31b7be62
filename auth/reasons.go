package auth

// Reason codes of the errors this package returns (rpcstatus ErrorInfo).
const (
	ReasonNoCredentials  = "no_credentials"     // UNAUTHENTICATED: nothing presented
	ReasonBadCredentials = "bad_credentials"    // UNAUTHENTICATED: forged, unknown or wrong secret
	ReasonTokenExpired   = "token_expired"      // UNAUTHENTICATED: an expired upload token
	ReasonWrongClass     = "wrong_caller_class" // PERMISSION_DENIED: e.g. a client calling Drain
	ReasonMissingRole    = "missing_role"       // PERMISSION_DENIED: an operator without the role
	ReasonUnclassified   = "unclassified_method"
	ReasonOtherUser      = "other_user"    // PERMISSION_DENIED: a client acting for another user
	ReasonNodeIdentity   = "node_identity" // PERMISSION_DENIED: a node claiming another node's ID or role
)
