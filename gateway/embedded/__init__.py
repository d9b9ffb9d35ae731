"""An embedded TubeMQ-compatible master and broker speaking the real wire protocol on loopback."""
