"""Generated protobuf modules; regenerate with ``python scripts/gen_protos.py``."""
