"""Ringleader's trainer: runs inside the pods the operator creates."""
