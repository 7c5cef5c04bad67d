"""Relay: wire protocol, TCP listeners, Channels consumers, routing, client library."""
