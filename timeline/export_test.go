package timeline

import "context"

// SetNodeOf replaces s's slot-to-master lookup (tests only), so a test
// can make a publish send one master's script keys another master holds.
func SetNodeOf(s *Server, f func(ctx context.Context, key string) string) { s.nodeOf = f }

// SlotHeldKey is the held count key of user's slot.
func SlotHeldKey(s *Server, user string) string { return s.slotHeld(s.slotOf(user)) }

// UserTag is userTag: a user ID escaped for a hash tag.
func UserTag(user string) string { return userTag(user) }
