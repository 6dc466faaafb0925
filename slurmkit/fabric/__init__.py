"""The fabric across nodes (`slurmkit fabric`): InfiniBand captures (`ibnetdiscover`, `-p`, `iblinkinfo`) -> nodes
and links (ibnet.py) -> the switch tree and its findings (tree.py) -> Slurm's topology.conf / topology.yaml and the
JSON (conf.py); NVLink domains from `nvidia-smi -q` Fabric sections -> topology/block (nvlink.py); the options
that keep a multi-node job under one leaf or in one block (placement.py). All pure; gathering `nvidia-smi -q` by
srun is the one capture edge (gather.py). docs/fabric.md describes the commands and the JSON."""
