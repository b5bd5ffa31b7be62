package flex

import (
	"time"

	willowv1 "willow/proto/willow/v1"
)

// AuditRecord is one audit-log entry as the CLI (`willow flex history
// --json`) and the console's /api/history show it.
type AuditRecord struct {
	At          string `json:"at"` // RFC 3339, UTC
	AtUnixMs    int64  `json:"at_unix_ms"`
	Actor       string `json:"actor"`
	Action      string `json:"action"`
	Scope       string `json:"scope,omitempty"`
	FromVersion int64  `json:"from_version"`
	ToVersion   int64  `json:"to_version"`
	From        string `json:"from,omitempty"`
	To          string `json:"to,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Accepted    bool   `json:"accepted"`
	Error       string `json:"error,omitempty"`
}

// AuditRecords converts audit entries, oldest order kept; never nil.
func AuditRecords(entries []*willowv1.AuditEntry) []AuditRecord {
	out := make([]AuditRecord, 0, len(entries))
	for _, e := range entries {
		out = append(out, AuditRecord{
			At: time.UnixMilli(e.GetAtUnixMs()).UTC().Format(time.RFC3339Nano), AtUnixMs: e.GetAtUnixMs(),
			Actor: e.GetActor(), Action: e.GetAction(), Scope: e.GetScope(),
			FromVersion: e.GetFromVersion(), ToVersion: e.GetToVersion(), From: e.GetFrom(), To: e.GetTo(),
			Reason: e.GetReason(), Accepted: e.GetAccepted(), Error: e.GetError(),
		})
	}
	return out
}
