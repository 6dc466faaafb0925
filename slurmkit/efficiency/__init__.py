"""Per-job GPU efficiency: is a job using the GPUs it holds?

capture -> parse -> decide -> report, as everywhere in slurmkit:
  sampler.py   the per-job sampler the prolog starts (NVML, else one `nvidia-smi -lms` child) and its watchdog
  hooks.py     the two calls the prolog/epilog make (start, stop + write the job record); standard library only
  model.py     the plain data every parser returns (Capture, GpuSeries, Finding)
  parse_*.py   captured text -> Capture (nvidia-smi CSV/dmon/pmon/table, dcgmi dmon, jobstats/seff/sacct)
  verdict.py   Capture + thresholds -> per-GPU and per-job verdicts with evidence (pure)
  record.py    the job-efficiency log (JSON lines, bounded)
  report.py    text, sparklines, next steps, `report idle` aggregation
  mfu.py       model FLOPs utilisation from reported FLOPs and the GPU's datasheet peak
"""
