package master

import (
	"context"

	willowv1 "willow/proto/willow/v1"
)

// flexState is the master's part that holds the flex document.
type flexState struct{}

func (s *Server) initFlex() error { return nil }

// flexSnapshot returns the current flex state for Route replies.
func (s *Server) flexSnapshot() *willowv1.FlexState { return nil }

// audit records one entry in the audit log.
func (s *Server) audit(e *willowv1.AuditEntry) {}

// runFlex runs the flex background work (expiry, sync between masters).
func (s *Server) runFlex(ctx context.Context) {}
