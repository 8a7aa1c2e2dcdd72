"""Test infrastructure that runs real parts (no pytest dependency).

* `wherry.testing.zookeeper` -- `ZooKeeperServer`: a real standalone ZooKeeper (Debian package)
  in a temporary directory, with restart, pause/resume and server-side session expiry.
* `wherry.testing.tcp_proxy` -- `TcpProxy`: a loopback TCP relay that can cut or black-hole its
  connections, to put one client on the wrong side of a network partition.
"""
