package upload

import (
	"willow/auth"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
)

// Methods is the upload front's caller-class table (package auth): the
// upload calls are the client's own, with its upload token on every one;
// pool reads are for nodes (edge caches); buffer status, drains and
// retries of failed media are for operators.
func Methods() auth.Table {
	client := auth.Rule{Classes: auth.Client}
	return auth.Table{
		willowv1.Upload_Begin_FullMethodName:        client,
		willowv1.Upload_Chunks_FullMethodName:       client,
		willowv1.Upload_Status_FullMethodName:       client,
		willowv1.Upload_Commit_FullMethodName:       client,
		willowv1.Upload_GetMedia_FullMethodName:     {Classes: auth.Client | auth.Node | auth.Operator, Role: auth.RoleRead},
		willowv1.Upload_ReadPool_FullMethodName:     {Classes: auth.Node},
		willowv1.Upload_BufferStatus_FullMethodName: {Classes: auth.Operator, Role: auth.RoleRead},
		willowv1.Upload_Drain_FullMethodName:        {Classes: auth.Operator, Role: auth.RoleOncall},
		willowv1.Upload_RetryMedia_FullMethodName:   {Classes: auth.Operator, Role: auth.RoleOncall},
	}
}

// ShedClasses is the upload front's admission table (package shedding):
// Begin is Deferred (the front may spill to buffer pool 1 instead of
// rejecting); nothing is shed mid-upload (Chunks, Commit and Status of an
// admitted upload pass); pool reads, buffer status and drains, which serve
// media already acknowledged, are Exempt. RetryMedia is Admitted. New
// declares it on the node's Shedder.
func ShedClasses() shedding.Classes {
	return shedding.Classes{
		willowv1.Upload_Begin_FullMethodName:        shedding.Deferred,
		willowv1.Upload_Chunks_FullMethodName:       shedding.Exempt,
		willowv1.Upload_Commit_FullMethodName:       shedding.Exempt,
		willowv1.Upload_Status_FullMethodName:       shedding.Exempt,
		willowv1.Upload_GetMedia_FullMethodName:     shedding.Exempt,
		willowv1.Upload_ReadPool_FullMethodName:     shedding.Exempt,
		willowv1.Upload_BufferStatus_FullMethodName: shedding.Exempt,
		willowv1.Upload_Drain_FullMethodName:        shedding.Exempt,
	}
}
