"""Ringleader's local Kubernetes: a real control plane built from the Go module proxy and a process node
that runs pods as local processes."""
