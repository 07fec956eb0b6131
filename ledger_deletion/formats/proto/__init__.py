"""Generated protobuf modules (see README.md in this folder for sources and the regeneration command)."""
