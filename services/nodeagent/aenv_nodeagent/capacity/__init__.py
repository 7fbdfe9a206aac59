"""A node's capacity from its host (`host.py`: CPUs, memory, disk, MemAvailable, PSI, PSS), what
it offers by its settings and when it is under memory pressure (`rules.py`, pure), what its VMs
really use, sampled off the event loop (`meter.py`), and the limit it enforces on itself
(`guard.py`)."""
