// Package cluster runs a whole Willow cluster in one process — one master,
// regions a and b each with an upload front, a compress worker and an edge
// cache, plus a timeline service — on free loopback ports (`willow up` and
// the integration tests), and describes clusters in cluster.json files.
package cluster
