"""A node's capacity from its host (`host.py`: CPUs, memory, disk, MemAvailable, PSI, PSS), what
it offers by its settings and when it is under memory pressure (`rules.py`, pure), and the limit
it enforces on itself (`guard.py`)."""
