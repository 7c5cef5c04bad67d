"""The cloud rendezvous relay (docs/design.md §14): where sites' leaders and remote clients meet.

A separate program (`runcloud`); the site side of the tunnel is `relay.server.cloud_tunnel`.

Vocabulary:

  tunnel        a site leader's outbound connection to the cloud (`peers`), fenced by epoch (`fence`)
  lease MAC     the site's proof of the lease it leads by, checked in the handshake (`handshake`)
  remote        a client that reaches its site through the cloud (`remote`, `remote_peers`)
  grant         a cross-site commander's right at the cloud (`grants`)
  node          one cloud process of several; the tunnels' directory is in etcd (`cluster`,
                `directory`), a remote client is forwarded to its site's node (`forward`)
"""
