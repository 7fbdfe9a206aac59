"""Fast tests of the sandbox wing's bookkeeping, over fakes: no QEMU, netns or etcd."""
