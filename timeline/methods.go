package timeline

import (
	"willow/auth"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
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

// ShedClasses is the timeline's admission table (package shedding): Stats,
// the operators' and nodes' read of the service's own figures, is Exempt;
// the social calls are Admitted. New declares it on the node's Shedder.
func ShedClasses() shedding.Classes {
	return shedding.Classes{willowv1.Timeline_Stats_FullMethodName: shedding.Exempt}
}
