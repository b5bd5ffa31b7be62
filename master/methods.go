package master

import (
	"willow/auth"
	willowv1 "willow/proto/willow/v1"
)

// Methods is the master's caller-class table (package auth). Register,
// Heartbeat, HeartbeatStream and Watch are node calls; Route serves clients, nodes and
// operators; flex reads and node listings need an operator with role
// read (or a node); every change (flex, rollback, drills, auto-flex mode, schedules) needs
// oncall.
func Methods() auth.Table {
	read := auth.Rule{Classes: auth.Operator | auth.Node, Role: auth.RoleRead}
	oncall := auth.Rule{Classes: auth.Operator, Role: auth.RoleOncall}
	return auth.Table{
		willowv1.Master_Register_FullMethodName:        {Classes: auth.Node},
		willowv1.Master_Heartbeat_FullMethodName:       {Classes: auth.Node},
		willowv1.Master_HeartbeatStream_FullMethodName: {Classes: auth.Node},
		willowv1.Master_Watch_FullMethodName:           {Classes: auth.Node},
		willowv1.Master_Route_FullMethodName:           {Classes: auth.Client | auth.Node | auth.Operator, Role: auth.RoleRead},
		willowv1.Master_GetFlex_FullMethodName:         read,
		willowv1.Master_SetFlex_FullMethodName:         oncall,
		willowv1.Master_RollbackFlex_FullMethodName:    oncall,
		willowv1.Master_FlexHistory_FullMethodName:     read,
		willowv1.Master_ListNodes_FullMethodName:       read,
		willowv1.Master_SetDrill_FullMethodName:        oncall,
		willowv1.Master_ListDrills_FullMethodName:      read,
		willowv1.Master_GetFlexAuto_FullMethodName:     read,
		willowv1.Master_SetFlexAuto_FullMethodName:     oncall,
		willowv1.Master_ScheduleFlex_FullMethodName:    oncall,
		willowv1.Master_ListSchedules_FullMethodName:   read,
		willowv1.Master_CancelSchedule_FullMethodName:  oncall,
	}
}
