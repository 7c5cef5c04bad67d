"""The web side of the agent: the admin panel (`panel/`), the JSON API, login
and tokens (`auth`), Prometheus metrics, health and leader lookup, and the SVG
timeline. Views read the local state and the database and call the steering
service for commands; they never touch the election's internals.
"""
