"""A leader's relay (docs/design.md §8, §16): asyncio listeners over the wire's cores.

Vocabulary:

  RelayServer   the listeners and what connections share (`relay_server`)
  peer          one accepted connection: `JsonPeer`, `PassthroughPeer` (`connections`)
  host          what a peer sees of its server (`host`)
  routing       who receives what (`routing`, pure)
  limits        connection caps and whom the relay turns away (`limits`)
  listen set    the addresses it listens on: NODE_IP, loopback, a held VIP (`listen_set`)
  bindings      stations held to their credentials (`bindings`, fed by `binding_feed`)
  gate          the serving right, asked before every send (passed in by the runner)
  external      the site's own relay binary as a child (`external_relay`), behind the
                fencing proxy (`fencing_proxy`); an entry member's forwarder (`entry`)
  tunnel        the leader's outbound tunnel to the cloud (`cloud_tunnel`, `tunnel_streams`)

Never imports the client, the cloud server, the web side or Django.
"""
