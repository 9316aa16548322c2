"""Security: the pure, network-free core of issue 12's authentication,
TLS settings, authorization and quotas.

- `acls`: the ACL model as Kafka names it (principal, host, resource type,
  pattern type, operation, permission), as `lograft.typed.Record` Structs
  built and validated from untrusted data.
- `authorizer`: Kafka's StandardAuthorizer decision rules over an indexed set
  of ACL bindings (deny wins, super users, allow-everyone-if-no-ACL, implied
  operations, wildcard principal/host/resource, prefixed patterns).
- `quotas`: Kafka-style client quotas (entities and their precedence, the
  windowed rate, the throttle time) over an injected clock.
- `failures`: `AuthenticationFailed` and its stable `AuthFailure` reasons
  (expired, bad_signature, wrong_audience, ...), safe to log and to return.
- `principals`: `User:<name>`, the principal every way in ends with.
- `passwords`: SCRAM credential records (salt, iterations, StoredKey,
  ServerKey; never the password), constant-time checks, HTTP Basic parsing.
- `tokens`: bearer JWTs (OAuth 2.0 / OIDC) verified with PyJWT against a
  JWKS from a file or URL (cached, refreshed, refetched on an unknown kid at
  a bounded rate): algorithms, `iss`, `aud`, `exp`/`nbf` with bounded skew,
  the principal from a configurable claim.
- `certificates`: a client certificate's principal from its subject with
  Kafka's `ssl.principal.mapping.rules`.
- `tls`: the `[tls]` settings (certificate, key, CA bundle, minimum version,
  client certificate none/optional/required, principal mapping rules) and the
  stdlib `ssl.SSLContext`s of a listener and of node-to-node clients.
- `local_ca`: a local CA and node/client certificates made with
  `cryptography` (`scripts/make_certs.py`), for clusters on machines you
  control and for tests.

Wired into the node by `lograft.api`: `authentication.py` (who is calling:
tokens, passwords against the metadata's SCRAM credentials, certificates),
`access.py` and `route_access.py` (ACLs), `quota_gate.py` (quotas); the
node config's `[tls]`, `[security]` and `[quotas]` sections hold the
settings defined here. Layering: this package imports only `lograft.errors`,
`lograft.typed` and stdlib / third-party libraries (import-linter's
"security" contract).
"""
