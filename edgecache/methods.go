package edgecache

import (
	"willow/auth"
	willowv1 "willow/proto/willow/v1"
)

// Methods is the edge cache's caller-class table (package auth): Get is
// for clients (their upload token) and for nodes (OC peers filling for
// their owner ring; a Get with peer set from a client is refused).
func Methods() auth.Table {
	return auth.Table{
		willowv1.EdgeCache_Get_FullMethodName: {Classes: auth.Client | auth.Node},
	}
}
