"""How a citizen's process reaches what the operator holds: the broker's socket
(`client`: where it is, an HTTP transport over it, a dev-mode broker started on
demand) and the steps only the broker may take for it (`steps`: merging into the
shared repositories, running an approved world action).

Nothing here holds a credential; the broker decides. May import config and errors only.
"""
