import os

# Fixtures shared by every test in the repository.
pytest_plugins = ["aenv_testing.etcd"]

# Node agents of tests capture `code-interpreter-v1` on its first use, not at every start: the
# code-interpreter tests wait for it, the rest never pay for it.
os.environ.setdefault("AENV_NODEAGENT_PREWARM_CODE_INTERPRETER", "false")
