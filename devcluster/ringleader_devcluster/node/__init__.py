"""The process node: a small kubelet that runs each bound Pod's containers as local processes."""
