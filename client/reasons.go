package client

// ReasonNoEndpoint: the router knows no node of the role the call needs
// (UNAVAILABLE). A spent retry budget is shedding.ReasonRetryBudget.
const ReasonNoEndpoint = "no_endpoint"
