"""Security: the pure, network-free core of issue 12's authorization and quotas.

- `acls`: the ACL model as Kafka names it (principal, host, resource type,
  pattern type, operation, permission), as `lograft.typed.Record` Structs
  built and validated from untrusted data.
- `authorizer`: Kafka's StandardAuthorizer decision rules over an indexed set
  of ACL bindings (deny wins, super users, allow-everyone-if-no-ACL, implied
  operations, wildcard principal/host/resource, prefixed patterns).
- `quotas`: Kafka-style client quotas (entities and their precedence, the
  windowed rate, the throttle time) over an injected clock.

NOT YET WIRED INTO THE NODE: nothing in api/, brokers/ or node/ uses this
package yet; no request is authenticated, authorized or throttled by it. The
wiring (metadata records, routes, config sections) is the next step of
issue 12. Layering: this package imports only `lograft.errors`,
`lograft.typed` and third-party libraries.
"""
