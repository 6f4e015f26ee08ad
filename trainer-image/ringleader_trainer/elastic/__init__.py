"""A job's process group over its life: forming it (`rendezvous`), re-forming it with a lost rank's replacement
and a live peer's state (`healing`), agreeing on a step to stop at (`stopping`), and a rank's process replaced
in place by its pod's supervisor (`recovery`)."""
