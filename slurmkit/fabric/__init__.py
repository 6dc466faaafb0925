"""The InfiniBand fabric across nodes: parse `ibnetdiscover` (default and `-p`) and `iblinkinfo` captures
(ibnet.py), build the switch tree, judge it and write Slurm's topology/tree and topology/block files (tree.py),
NVLink domains from `nvidia-smi -q` Fabric sections (nvlink.py). Pure functions over text; capture is at the
edge (live.py). docs/fabric.md describes the commands and the JSON."""
