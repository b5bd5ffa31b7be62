package shedding

// Reasons of a shed call (RESOURCE_EXHAUSTED with a retry-after hint).
const (
	// ReasonShedRatio: the call's business is over its shed_ratio.
	ReasonShedRatio = "shed_ratio"
	// ReasonOverload: the callee is overloaded (or the caller shed early
	// for it).
	ReasonOverload = "overload"
	// ReasonRetryBudget: the client's retry budget is spent; the error
	// of the last attempt is in the message.
	ReasonRetryBudget = "retry_budget"
)
