package compress

import (
	"willow/auth"
	willowv1 "willow/proto/willow/v1"
)

// Methods is the compress worker's caller-class table (package auth):
// only nodes (upload fronts) ask for variants.
func Methods() auth.Table {
	return auth.Table{
		willowv1.Compress_Compress_FullMethodName: {Classes: auth.Node},
	}
}
