"""Worker processes: one task queue per pool (workflow, pulsar, bookkeeper, offload), scaled independently."""
