# Fixtures shared by every test in the repository.
pytest_plugins = ["aenv_common.testing.etcd"]
