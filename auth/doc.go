// Package auth authenticates every call a Willow service receives and
// decides whether its caller may make it (DESIGN.md invariant 7).
//
// There are four caller classes:
//
//   - Public: anyone. Only grpc.health.v1, server reflection and the admin
//     port's /healthz and /metrics (the admin port belongs on the cluster
//     network only; docs/security.md).
//   - Client: a phone or browser user, proven by an upload token
//     (package token) in the metadata "authorization: Bearer TOKEN". The
//     Caller carries the token's user and business.
//   - Operator: a named person (on-call engineer, capacity planner), proven
//     by a personal token in "authorization: Bearer TOKEN" that the service
//     looks up by its SHA-256 in an identities file (LoadOperators). The
//     Caller carries the name and roles (read, oncall, admin; admin implies
//     oncall, oncall implies read).
//   - Node: another Willow process. With mutual TLS the verified client
//     certificate names it: Subject CommonName is the node ID, the first
//     OrganizationalUnit its role. Without TLS it sends the cluster secret
//     in "x-willow-cluster-secret" plus its ID, role and a per-process
//     instance key in "x-willow-node-id", "x-willow-node-role" and
//     "x-willow-node-instance". NodeCredentials attaches them to every call
//     of a connection.
//
// Every service declares, in one Table, which classes may call each of its
// methods (and, for operators, which role they need). A Guard holds the
// tables of the services registered on one gRPC server and its single
// unary and stream interceptors enforce them. Guarantees:
//
//   - Every call and every stream is authenticated before the handler runs;
//     a stream is authenticated once when it opens, and its credential
//     holds for every message on it.
//   - A method no table classifies is refused (PERMISSION_DENIED
//     unclassified_method): a new RPC cannot ship open by accident.
//   - No or unverifiable credentials: UNAUTHENTICATED with a reason
//     (no_credentials, bad_credentials, token_expired). Valid credentials
//     of a class the method does not accept, or an operator without the
//     role: PERMISSION_DENIED (wrong_caller_class, missing_role). Reasons
//     travel as rpcstatus ErrorInfo.
//   - Handlers read the authenticated identity with FromContext and never
//     trust identity fields of the request itself (an audit actor, a user
//     name): those are checked against the Caller (ErrOtherUser).
//   - Secrets and tokens are compared in constant time; operator tokens are
//     stored only as SHA-256 hashes.
//
// A Guard built with Open (no credentials configured) still refuses
// unclassified methods but lets every classified call through without a
// Caller. It exists for in-process unit tests; every service main and
// willow up configure credentials and refuse to start without them.
package auth
