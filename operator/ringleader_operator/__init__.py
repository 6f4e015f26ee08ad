"""Ringleader's operator: TrainingJob custom resources become ranked training pods, rendezvous services and
honest status."""
