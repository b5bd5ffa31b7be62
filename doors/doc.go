// Package doors holds Willow's hostile-client test suite (issue 22): one
// test per door, each written from the attacker's side through the raw
// gRPC protocol (the generated willowv1 stubs and hand-set metadata, no
// SDK), against a one-box cluster started as willow up starts one, and
// each also checking that the legitimate path still works.
//
// The package has no code of its own; see docs/security.md for the
// threat model the tests hold.
package doors
