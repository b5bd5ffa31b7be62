package timeline

import (
	"willow/auth"
	willowv1 "willow/proto/willow/v1"
)

// Methods is the timeline's caller-class table (package auth). Follow,
// Publish and Poll are client calls (and node calls: a system that owns
// the social graph holds a node credential); on-call operators may make
// them too (the willow timeline CLI). Stats is for operators and nodes.
func Methods() auth.Table {
	social := auth.Rule{Classes: auth.Client | auth.Node | auth.Operator, Role: auth.RoleOncall}
	return auth.Table{
		willowv1.Timeline_Follow_FullMethodName:   social,
		willowv1.Timeline_Unfollow_FullMethodName: social,
		willowv1.Timeline_Publish_FullMethodName:  social,
		willowv1.Timeline_Poll_FullMethodName:     social,
		willowv1.Timeline_Stats_FullMethodName:    {Classes: auth.Operator | auth.Node, Role: auth.RoleRead},
	}
}
