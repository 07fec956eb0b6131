"""Activities: one class per external system, holding its client; sync methods run on a thread pool."""
