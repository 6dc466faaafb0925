"""Checkpoints that are complete or invisible: the job-side helper and the manifest the epilog's sync reads.

No heavy imports here: training scripts and the epilog import this.
"""
