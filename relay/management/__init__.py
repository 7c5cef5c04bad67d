"""The relay app's operator side: its management commands, and `relayclient`'s options.

Vocabulary:

  Stop      how relayclient ends: an exit status and one line (`client_options`)
  options   the arguments of one relayclient action, and the `RelayClient` they make
"""
